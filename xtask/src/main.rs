//! Build steps of our own, run as `cargo xtask …` (see .cargo/config.toml):
//!
//! - `site`: the web assets the server embeds: the app compiled to wasm, its JS glue from
//!   wasm-bindgen (used as a library), wasm-opt, the stylesheet and the public files, each with
//!   brotli and gzip copies beside it. This is the part of cargo-leptos Lanes used; installing
//!   cargo-leptos and the wasm-bindgen CLI compiled for 27 minutes on a fresh 2-core machine
//!   before the project itself began (docs/benchmarks.md, "First run").
//! - `deb`: the Debian package from the release binary and deploy/.

use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod deb;

const USAGE: &str =
    "usage: cargo xtask site [--dev] | cargo xtask deb [--binary PATH] [--version-suffix S]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("site") => site(&args[1..]),
        Some("deb") => deb::package(&workspace_root(), &args[1..]),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = outcome {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

/// The workspace root: xtask's manifest sits one level below it.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ has a parent")
        .to_path_buf()
}

/// Which build of the hydrate bundle: small and optimized, or quick to make.
#[derive(Clone, Copy, PartialEq)]
enum Flavour {
    Release,
    Dev,
}

fn site(args: &[String]) -> Result<()> {
    let flavour = match args {
        [] => Flavour::Release,
        [flag] if flag == "--dev" => Flavour::Dev,
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let site = target.join("site");
    let profile = match flavour {
        Flavour::Release => "wasm-release",
        Flavour::Dev => "dev",
    };

    let started = Instant::now();
    step("wasm", || {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&root)
            .args([
                "build",
                "--package=lanes-app",
                "--lib",
                "--target=wasm32-unknown-unknown",
                "--no-default-features",
                "--features=hydrate",
                &format!("--profile={profile}"),
            ])
            // Relocations kept in the linked wasm are what the split step reads to cut it
            // at the lazy routes.
            .env("RUSTFLAGS", split_rustflags())
            .status()
            .context("cannot run cargo")?;
        if !status.success() {
            bail!("building the app for the browser failed");
        }
        Ok(())
    })?;

    let dir = if profile == "dev" { "debug" } else { profile };
    let wasm = target
        .join("wasm32-unknown-unknown")
        .join(dir)
        .join("lanes_app.wasm");
    // Unchanged inputs leave target/site untouched, so the server (which embeds it) is not
    // rebuilt either: `make build` twice costs the second time nothing.
    let stamp_file = target.join("site.stamp");
    let stamp = inputs_stamp(&root, &wasm, profile)?;
    if site.exists() && fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp.as_str()) {
        println!("site: {} is up to date", site.display());
        return Ok(());
    }

    // Everything goes to a fresh folder that replaces the old one whole, so the server never
    // embeds a mix of two builds.
    let staging = target.join("site.new");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    let pkg = staging.join("pkg");
    fs::create_dir_all(&pkg)?;
    // The lazy routes' code goes to chunks beside the bundle, loaded as a route opens; what
    // is left is the main module, which wasm-bindgen then finishes as before.
    // Kept in target/ (not the site): with its names, it shows what the first load carries.
    let main = target.join("lanes_split.wasm");
    let chunks = step_with("wasm-split", || split(&wasm, &pkg, &main))?;
    step("wasm-bindgen", || {
        wasm_bindgen_cli_support::Bindgen::new()
            .input_path(&main)
            .out_name("lanes")
            .web(true)?
            .typescript(false)
            // The chunks link to the main module's functions by their linker names.
            .keep_lld_exports(true)
            .demangle(false)
            .generate(&pkg)
    })?;
    if flavour == Flavour::Release {
        step("wasm-opt", || {
            // The main module, which every visit loads, is optimized until nothing more comes
            // off (`--converge`: about 1 KB of its brotli copy for half a minute here).
            let main = pkg.join("lanes_bg.wasm");
            let mut files = vec![main.clone()];
            files.extend(chunks.iter().cloned());
            on_every_core(&files, |file| wasm_opt(file, *file == main))
        })?;
    }
    step("assets", || {
        fs::copy(root.join("style/main.css"), pkg.join("lanes.css"))?;
        copy_tree(&root.join("public"), &staging)
    })?;
    step("compress", || compress_tree(&staging))?;
    if site.exists() {
        fs::remove_dir_all(&site)?;
    }
    fs::rename(&staging, &site)?;
    fs::write(&stamp_file, stamp)?;
    println!(
        "site: {} in {:.1} s",
        site.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the site is made from: the wasm cargo wrote, the stylesheet, the public files, this
/// program (size and modification time of each), and the profile.
fn inputs_stamp(root: &Path, wasm: &Path, profile: &str) -> Result<String> {
    // This program too: a change to how the site is made remakes it.
    let mut files = vec![
        wasm.to_path_buf(),
        root.join("style/main.css"),
        std::env::current_exe()?,
    ];
    let mut stack = vec![root.join("public")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut stamp = format!("profile {profile}\n");
    for file in files {
        let meta = fs::metadata(&file).with_context(|| format!("reading {}", file.display()))?;
        let modified = meta
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        stamp.push_str(&format!(
            "{} {} {}\n",
            file.display(),
            meta.len(),
            modified.as_nanos()
        ));
    }
    Ok(stamp)
}

/// Runs one step, naming it and its time, so a slow build says where the time went.
fn step(name: &str, run: impl FnOnce() -> Result<()>) -> Result<()> {
    step_with(name, run)
}

fn step_with<T>(name: &str, run: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let made = run().with_context(|| format!("step {name}"))?;
    println!("  {name}: {:.1} s", started.elapsed().as_secs_f64());
    Ok(made)
}

/// The flags of the wasm build: the caller's (`RUSTFLAGS`, such as `-Dwarnings`) and the
/// linker's relocations, which the split step needs.
fn split_rustflags() -> String {
    let own = std::env::var("RUSTFLAGS").unwrap_or_default();
    format!("{own} -Clink-args=--emit-relocs")
        .trim()
        .to_string()
}

/// The split step's map from each lazy route to the chunks it loads (the name Leptos reads).
const SPLIT_MANIFEST: &str = "__wasm_split_manifest.json";

/// Cuts the app's wasm at its lazy routes (`#[lazy_route]`, wasm_split_cli_support, the
/// library cargo-leptos uses for the same): the main module goes to `main`, each chunk and
/// the loader (`__wasm_split.js`, imported by the main module) to `pkg`. Returns the chunks.
fn split(wasm: &Path, pkg: &Path, main: &Path) -> Result<Vec<PathBuf>> {
    let input = fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
    let mut options = wasm_split_cli_support::Options::new(&input);
    options.output_dir = pkg;
    options.main_out_path = main;
    // The loader imports `initSync` from the bundle's JS, beside it.
    options.main_module = "./lanes.js";
    options.link_name = "./__wasm_split.js";
    let split = wasm_split_cli_support::transform(options)
        .map_err(|e| anyhow::anyhow!("splitting the bundle: {e:#}"))?;
    // Which chunks each lazy route needs, for the server to preload with a page that opens
    // on one (as Leptos' `HydrationScripts` does with cargo-leptos's copy of this file).
    let manifest: std::collections::BTreeMap<_, _> = split.prefetch_map.into_iter().collect();
    fs::write(
        pkg.join(SPLIT_MANIFEST),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    Ok(split.split_modules)
}

/// Runs `work` on every item, as many at a time as there are cores (wasm-opt is one thread a
/// file, and the split site has dozens of them); the first failure is the answer.
fn on_every_core<T: Sync>(items: &[T], work: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..cores.min(items.len()))
            .map(|_| {
                scope.spawn(|| {
                    while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                        work(item)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|worker| worker.join().expect("a wasm-opt worker panicked"))
    })
}

/// binaryen's optimizer, from npm (Makefile `tools`): Debian's is too old for today's wasm.
fn wasm_opt(file: &Path, converge: bool) -> Result<()> {
    let run = Command::new("wasm-opt")
        .args(["-Oz", "--enable-bulk-memory"])
        .args(converge.then_some("--converge"))
        .arg(file)
        .arg("-o")
        .arg(file)
        .output()
        .context("cannot run wasm-opt (run `make tools`, which installs binaryen from npm)")?;
    // The split step's chunks carry a names subsection binaryen does not know (and drops):
    // said once per chunk, it is not news.
    for line in String::from_utf8_lossy(&run.stderr).lines() {
        if !line.starts_with("warning: unknown name subsection") {
            eprintln!("{line}");
        }
    }
    if !run.status.success() {
        bail!("wasm-opt failed on {}", file.display());
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            fs::create_dir_all(&dest)?;
            copy_tree(&entry.path(), &dest)?;
        } else {
            fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// Kinds of file worth compressing (images other than SVG are compressed already).
fn compressible(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("js" | "wasm" | "css" | "svg" | "html" | "json" | "txt" | "map")
    )
}

/// Writes `X.br` and `X.gz` beside every compressible file `X`, at the strongest settings:
/// made once here, served many times.
fn compress_tree(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            compress_tree(&path)?;
            continue;
        }
        if !compressible(&path) {
            continue;
        }
        let body = fs::read(&path)?;
        let mut br = Vec::with_capacity(body.len() / 3);
        {
            let params = brotli::enc::BrotliEncoderParams {
                quality: 11,
                lgwin: 24,
                ..Default::default()
            };
            brotli::BrotliCompress(&mut body.as_slice(), &mut br, &params)?;
        }
        fs::write(with_suffix(&path, "br"), br)?;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&body)?;
        fs::write(with_suffix(&path, "gz"), gz.finish()?)?;
    }
    Ok(())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}
