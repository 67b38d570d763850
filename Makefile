# SPDX-License-Identifier: GPL-2.0
#
# Convenience wrapper; the real tooling is `cargo xtask` (see README.md).
#
#   make test [PATTERN=...]   cargo xtask test [PATTERN]: host tests + selftests in a VM
#   make demo                 cargo xtask demo: a real trace in a VM
#   make module KDIR=...      build rust-kmod/fctrace.ko against your kernel build tree
#   make module               the same against the test kernel (cargo xtask module)
#   make setup | kernel | initramfs | vm   the cargo xtask command of that name

CARGO ?= cargo

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

test:
	$(CARGO) xtask test $(PATTERN)

demo:
	$(CARGO) xtask demo

module:
ifdef KDIR
	$(MAKE) -C rust-kmod KDIR=$(KDIR)
else
	$(CARGO) xtask module
endif

setup kernel initramfs vm:
	$(CARGO) xtask $@

.PHONY: help test demo module setup kernel initramfs vm
