//! Embeds the web assets in the binary when `LANES_SITE_DIR` names them (the Makefile's release
//! build sets it to target/site, which `cargo xtask site` writes), so `lanes serve` needs no
//! files beside it. Unset, nothing is embedded and the server reads `--site-root`.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=LANES_SITE_DIR");
    let mut files = Vec::new();
    if let Some(dir) = std::env::var_os("LANES_SITE_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        let dir = dir.canonicalize().unwrap_or_else(|e| {
            panic!(
                "LANES_SITE_DIR={}: {e} (build the site first: cargo xtask site)",
                dir.display()
            )
        });
        println!("cargo:rerun-if-changed={}", dir.display());
        walk(&dir, &dir, &mut files);
        files.sort();
    }
    let mut code = String::from("pub static FILES: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        let _ = writeln!(code, "    ({name:?}, include_bytes!({path:?})),");
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("site.rs"), code).expect("OUT_DIR is writable");
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a readable directory entry").path();
        if path.is_dir() {
            walk(root, &path, files);
        } else if let Ok(rel) = path.strip_prefix(root) {
            files.push((
                rel.to_string_lossy().replace('\\', "/"),
                path.to_string_lossy().into_owned(),
            ));
        }
    }
}
