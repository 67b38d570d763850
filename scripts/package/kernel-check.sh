# SPDX-License-Identifier: GPL-2.0
#
# fctrace_check KERNELRELEASE: whether fctrace.ko can be built here for that kernel.
# Prints nothing and succeeds if it can; else prints, in one line, why not and what
# to install, and fails (under `set -e` too). Sourced by the package's maintainer
# scripts (the preinst has a copy) and by dkms-build.
#
# A Debian kernel's headers have no Rust metadata (rust/*.rmeta, libmacros.so), so
# the module needs the kernel's own source of the same version (linux-source-X.Y),
# configured with the kernel's configuration, and the exact rustc and bindgen the
# kernel was built with (Rust metadata from another compiler cannot be loaded).
fctrace_check() {
	fc_k=$1
	fc_cfg=/lib/modules/$fc_k/build/.config
	if ! [ -f "$fc_cfg" ]; then
		echo "no headers for $fc_k (install linux-headers-$fc_k)"
		return 1
	fi
	if ! grep -q '^CONFIG_RUST=y' "$fc_cfg"; then
		echo "$fc_k has no CONFIG_RUST: fctrace needs a kernel built with Rust, such as Debian's 7.x kernels (trixie-backports)"
		return 1
	fi
	if ! grep -qE '^CONFIG_(X86_64|ARM64)=y' "$fc_cfg"; then
		echo "$fc_k is for an architecture fctrace does not support (x86-64 and arm64 only)"
		return 1
	fi
	for fc_o in KPROBES PREEMPT_COUNT RING_BUFFER; do
		if ! grep -q "^CONFIG_$fc_o=y" "$fc_cfg"; then
			echo "$fc_k has no CONFIG_$fc_o, which fctrace needs"
			return 1
		fi
	done
	fc_want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"$/\1/p' "$fc_cfg")
	fc_have=$(rustc --version 2>/dev/null || true)
	if [ "$fc_have" != "$fc_want" ]; then
		echo "$fc_k was built with $fc_want, but rustc here is ${fc_have:-missing}: install that rustc"
		return 1
	fi
	fc_want=$(sed -n 's/^CONFIG_BINDGEN_VERSION_TEXT="\(.*\)"$/\1/p' "$fc_cfg")
	fc_have=$( (bindgen --version 2>/dev/null || true) | head -n 1)
	if [ "$fc_have" != "$fc_want" ]; then
		echo "$fc_k was built with $fc_want, but bindgen here is ${fc_have:-missing}: install that bindgen"
		return 1
	fi
	fc_series=$(echo "$fc_k" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
	if ! [ -f "/usr/src/linux-source-$fc_series.tar.xz" ]; then
		echo "$fc_k needs its source for the Rust metadata its headers lack: install linux-source-$fc_series"
		return 1
	fi
	fc_hv=$(dpkg-query -W -f '${Version}' "linux-headers-$fc_k" 2>/dev/null || true)
	fc_sv=$(dpkg-query -W -f '${Version}' "linux-source-$fc_series" 2>/dev/null || true)
	if [ -n "$fc_hv" ] && [ "$fc_hv" != "$fc_sv" ]; then
		echo "the headers of $fc_k are version $fc_hv, linux-source-$fc_series is ${fc_sv:-missing}: install linux-source-$fc_series=$fc_hv"
		return 1
	fi
	return 0
}

# fctrace_kernels: the kernels whose headers are installed, one per line.
fctrace_kernels() {
	for fc_b in /lib/modules/*/build; do
		[ -e "$fc_b/.config" ] || continue
		fc_b=${fc_b%/build}
		echo "${fc_b##*/}"
	done
}
