// SPDX-License-Identifier: GPL-2.0

//! Packages fetched from Debian's archive outside any root, checked as apt checks them:
//! the suite's `InRelease` with `gpgv` and Debian's archive keyring, the package index
//! against its SHA256 there, each package against its SHA256 in the index. Used for
//! pahole (`pahole.rs`) and Debian's arm64 kernel image (`arm64.rs`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{bail, echo, Result};

/// The archive.
pub const MIRROR: &str = "http://deb.debian.org/debian";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// One package's stanza in an index: what to fetch and how to check it.
pub struct Package {
    pub version: String,
    pub filename: String,
    pub sha256: String,
}

/// The text of `suite`'s package index `index` (e.g. `main/binary-amd64/Packages.xz`),
/// verified from the suite's signed `InRelease`; `tmp` holds the downloads, which are
/// removed again.
pub fn signed_index(suite: &str, index: &str, tmp: &Path) -> Result<String> {
    let base = format!("{MIRROR}/dists/{suite}");
    let inrelease = tmp.join("InRelease");
    fetch(&format!("{base}/InRelease"), &inrelease)?;
    let release = tmp.join("Release");
    duct::cmd!(
        "gpgv",
        "--keyring",
        KEYRING,
        "--output",
        &release,
        &inrelease
    )
    .before_spawn(echo)
    .stderr_capture()
    .run()
    .map_err(|e| format!("gpgv: {suite}'s InRelease does not verify: {e}"))?;
    let text = fs::read_to_string(&release)?;
    let want = release_sha256(&text, index)
        .ok_or_else(|| format!("{suite}'s Release names no SHA256 for {index}"))?;
    let index_xz = tmp.join("Packages.xz");
    fetch(&format!("{base}/{index}"), &index_xz)?;
    check_sha256(&index_xz, &want)?;
    let out = duct::cmd!("xz", "-dc", &index_xz).read()?;
    for f in [&inrelease, &release, &index_xz] {
        fs::remove_file(f)?;
    }
    Ok(out)
}

/// Downloads package `p` to `to` and checks it against its index's SHA256.
pub fn fetch_package(p: &Package, to: &Path) -> Result<PathBuf> {
    fetch(&format!("{MIRROR}/{}", p.filename), to)?;
    check_sha256(to, &p.sha256)?;
    Ok(to.to_path_buf())
}

fn fetch(url: &str, to: &Path) -> Result<()> {
    duct::cmd!("curl", "-fsSL", "--retry", "3", "-o", to, url)
        .before_spawn(echo)
        .run()
        .map_err(|e| format!("downloading {url}: {e}"))?;
    Ok(())
}

fn check_sha256(file: &Path, want: &str) -> Result<()> {
    let out = duct::cmd!("sha256sum", file).read()?;
    let got = out.split_whitespace().next().unwrap_or("");
    if got != want {
        bail!("{}: sha256 {got}, expected {want}", file.display());
    }
    Ok(())
}

/// The SHA256 the release file gives for `path` (its `SHA256:` section).
fn release_sha256(release: &str, path: &str) -> Option<String> {
    let mut in_sha = false;
    for line in release.lines() {
        if !line.starts_with(' ') {
            in_sha = line.trim_end() == "SHA256:";
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if in_sha && f.len() == 3 && f[2] == path {
            return Some(f[0].to_string());
        }
    }
    None
}

/// Package `name`'s stanza in a Packages index.
pub fn find_package(index: &str, name: &str) -> Option<Package> {
    index.split("\n\n").find_map(|stanza| {
        let field = |k: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(": "))
                .map(str::to_string)
        };
        (field("Package")?.as_str() == name).then_some(())?;
        Some(Package {
            version: field("Version")?,
            filename: field("Filename")?,
            sha256: field("SHA256")?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_and_index_fields() {
        let index_path = "main/binary-amd64/Packages.xz";
        let release = "Origin: Debian\nMD5Sum:\n 0123 10 main/binary-amd64/Packages.xz\nSHA256:\n aaaa 5 main/binary-all/Packages.xz\n bbbb 9 main/binary-amd64/Packages.xz\n";
        assert_eq!(release_sha256(release, index_path).as_deref(), Some("bbbb"));
        assert_eq!(release_sha256(release, "main/x"), None);
        let index = "Package: pahole-dbg\nVersion: 1\nFilename: a\nSHA256: 1\n\nPackage: pahole\nVersion: 1.30-1\nFilename: pool/main/d/dwarves/pahole_1.30-1_amd64.deb\nSHA256: cc\n";
        let p = find_package(index, "pahole").unwrap();
        assert_eq!(p.version, "1.30-1");
        assert_eq!(p.filename, "pool/main/d/dwarves/pahole_1.30-1_amd64.deb");
        assert_eq!(p.sha256, "cc");
        assert!(find_package(index, "libc6").is_none());
    }
}
