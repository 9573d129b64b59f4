//! Generates the `i18n` module from `locales/{en,zh}.json` (leptos_i18n): a key missing from
//! either file, or an interpolation the two files name differently, fails the build.

use leptos_i18n_build::{Config, ParseOptions, TranslationsInfos};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=Cargo.toml");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?).join("i18n");
    // Interpolated texts as plain strings too (`td_string!`): pages are redrawn by a reload, and
    // the server writes API messages and mail with them.
    let options = ParseOptions::new().interpolate_display(true);
    let config = Config::new("en")?.add_locale("zh")?.parse_options(options);
    let infos = TranslationsInfos::parse(config)?;
    infos.emit_diagnostics();
    infos.rerun_if_locales_changed();
    infos.generate_i18n_module(out)?;
    Ok(())
}
