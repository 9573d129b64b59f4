//! `cargo xtask deb`: the Debian package, assembled from the release binary (which embeds the
//! web assets), deploy/ (unit, config, maintainer scripts) and man pages the binary writes,
//! then built by Debian's own `dpkg-deb`. cargo-deb would do the same; it is one more tool to
//! compile on a fresh machine for what is a folder and a control file.

use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

pub fn package(root: &Path, args: &[String]) -> Result<()> {
    const USAGE: &str = "usage: cargo xtask deb [--binary PATH] [--version-suffix S]";
    let target = root.join("target");
    // The release binary, as `make deb` builds it; `make test` packages its test binary.
    let mut binary = target.join("release/lanes");
    let mut suffix = String::new();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let Some(value) = rest.next() else {
            bail!("{USAGE}")
        };
        match flag.as_str() {
            "--binary" => binary = value.into(),
            "--version-suffix" => suffix = format!("+{value}"),
            _ => bail!("{USAGE}"),
        }
    }
    if !binary.exists() {
        bail!("{} is missing: run `make build` first", binary.display());
    }
    let version = format!("{}{suffix}", env!("CARGO_PKG_VERSION"));
    let arch = output(Command::new("dpkg").arg("--print-architecture"))?;
    let tree = target.join("deb/root");
    if tree.exists() {
        fs::remove_dir_all(&tree)?;
    }
    let deploy = root.join("deploy");

    let bin = tree.join("usr/bin/lanes");
    install(&binary, &bin, 0o755)?;
    // Symbols help nobody on a server and are a third of the file.
    let _ = Command::new("strip")
        .arg("--strip-unneeded")
        .arg(&bin)
        .status();
    install(
        &deploy.join("systemd/lanes.service"),
        &tree.join("lib/systemd/system/lanes.service"),
        0o644,
    )?;
    install(
        &deploy.join("lanes.toml"),
        &tree.join("etc/lanes/lanes.toml"),
        0o640,
    )?;
    let doc = tree.join("usr/share/doc/lanes");
    fs::create_dir_all(&doc)?;
    fs::write(
        doc.join("copyright"),
        "Lanes: a self-hosted GPU pool portal.\nLicense: MIT OR Apache-2.0\n",
    )?;
    install(
        &root.join("docs/operations.md"),
        &doc.join("operations.md"),
        0o644,
    )?;

    let man = tree.join("usr/share/man/man1");
    fs::create_dir_all(&man)?;
    run(Command::new(&bin).arg("man-pages").arg(&man))?;
    for page in fs::read_dir(&man)? {
        run(Command::new("gzip").args(["-9n"]).arg(page?.path()))?;
    }

    let control = tree.join("DEBIAN");
    fs::create_dir_all(&control)?;
    for script in ["postinst", "prerm", "postrm"] {
        install(
            &deploy.join("debian").join(script),
            &control.join(script),
            0o755,
        )?;
    }
    fs::write(control.join("conffiles"), "/etc/lanes/lanes.toml\n")?;
    let glibc = glibc_needed(&bin)?;
    fs::write(
        control.join("control"),
        format!(
            "Package: lanes\n\
             Version: {version}\n\
             Architecture: {arch}\n\
             Maintainer: Lanes developers <lanes@localhost>\n\
             Installed-Size: {size}\n\
             Depends: libc6 (>= {glibc}), libgcc-s1\n\
             Suggests: postgresql\n\
             Section: admin\n\
             Priority: optional\n\
             Description: self-hosted GPU pool portal\n \
             Lanes shows every GPU's use live, books cards for time slots, runs jobs as the\n \
             booking user on exactly the booked cards, and queues the rest. One binary with\n \
             its web pages inside; SQLite for one host, PostgreSQL for many.\n",
            size = tree_size(&tree)? / 1024 + 1,
        ),
    )?;

    let out = target.join(format!("deb/lanes_{version}_{arch}.deb"));
    run(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group", "-Zxz"])
        .arg(&tree)
        .arg(&out))?;
    println!("{}", out.display());
    Ok(())
}

fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The newest glibc symbol version the binary uses: the package's lowest libc6.
fn glibc_needed(binary: &Path) -> Result<String> {
    let symbols = output(Command::new("objdump").arg("-T").arg(binary))?;
    let newest = symbols
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max()
        .context("no glibc symbols in the binary")?;
    Ok(format!("{}.{}", newest.0, newest.1))
}

fn tree_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            tree_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed");
    }
    Ok(())
}

fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
