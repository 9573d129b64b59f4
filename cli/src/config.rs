//! Where the client finds its portal and token: `~/.config/lanes/config.toml` (or under
//! `$XDG_CONFIG_HOME`), written by `lanes login` with mode 0600; `LANES_URL` and `LANES_TOKEN`
//! override it. A file that others can read is refused, not used: it holds a secret.

use crate::error::{CliError, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The portal, `http://host:port`.
    pub url: String,
    /// The API token `lanes login` made.
    pub token: String,
    /// Its id, so that `lanes logout` can revoke it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<i64>,
    /// Who logged in, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
}

/// The config file's path.
pub fn path() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".config"),
            None => return Err(CliError::usage("neither HOME nor XDG_CONFIG_HOME is set")),
        },
    };
    Ok(base.join("lanes").join("config.toml"))
}

/// The saved login, if any; refused when the file is readable by others or is not ours.
pub fn load() -> Result<Option<Config>> {
    let path = path()?;
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CliError::usage(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    if meta.mode() & 0o077 != 0 {
        return Err(CliError::usage(format!(
            "{} holds an API token but others may read it (mode {:o}); refusing to use it: \
             run `chmod 600 {}`, or `lanes login` again",
            path.display(),
            meta.mode() & 0o777,
            path.display()
        )));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(CliError::usage(format!(
            "{} belongs to another user; refusing to use it",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text)
        .map(Some)
        .map_err(|e| CliError::usage(format!("{} is not a Lanes config: {e}", path.display())))
}

/// Writes the login with mode 0600 (its directory 0700), replacing the file whole.
pub fn save(config: &Config) -> Result<PathBuf> {
    let path = path()?;
    let dir = path.parent().expect("the config path has a directory");
    let fail = |e: std::io::Error| CliError::usage(format!("cannot write {}: {e}", path.display()));
    std::fs::create_dir_all(dir).map_err(fail)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
    let text = toml::to_string(config).map_err(|e| CliError::usage(e.to_string()))?;
    let temp = dir.join(format!(".config.toml.{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(fail)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            fail(e)
        })?;
    Ok(path)
}

/// Removes the saved login; no file is fine.
pub fn remove() -> Result<()> {
    let path = path()?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CliError::usage(format!(
            "cannot remove {}: {e}",
            path.display()
        ))),
    }
}

/// The portal and token a command uses: the environment first, then the file.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub token: String,
}

pub fn target() -> Result<Target> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (url, token) = (env("LANES_URL"), env("LANES_TOKEN"));
    let file = match (&url, &token) {
        (Some(_), Some(_)) => None,
        _ => load()?,
    };
    // A saved token goes only to the portal it was saved for: `LANES_URL` naming another
    // portal does not take it along.
    if let (Some(url), None, Some(saved)) = (&url, &token, &file) {
        if normalize_url(url) != normalize_url(&saved.url) {
            return Err(CliError::usage(format!(
                "no token for {}: the saved login is for {}; run `lanes login {}` (or set \
                 LANES_TOKEN)",
                normalize_url(url),
                normalize_url(&saved.url),
                normalize_url(url)
            )));
        }
    }
    let url = url.or_else(|| file.as_ref().map(|c| c.url.clone()));
    let token = token.or_else(|| file.as_ref().map(|c| c.token.clone()));
    match (url, token) {
        (Some(url), Some(token)) => Ok(Target { url, token }),
        (None, _) => Err(CliError::usage(
            "no portal to talk to: run `lanes login URL` (or set LANES_URL and LANES_TOKEN)",
        )),
        (Some(_), None) => Err(CliError::usage(
            "no token for the portal: run `lanes login` (or set LANES_TOKEN)",
        )),
    }
}

/// A client of the target portal, with its token.
pub fn client() -> Result<lanes_client::Client> {
    let target = target()?;
    client_for(&target.url, &target.token)
}

/// A client of `url` carrying `token`.
pub fn client_for(url: &str, token: &str) -> Result<lanes_client::Client> {
    Ok(
        lanes_client::Client::with_http(portal_url(url)?, reqwest_client()?)
            .as_(lanes_client::Credentials::Token(token.to_string())),
    )
}

/// The portal's address as typed (`gpu1:3000`, `http://gpu1:3000/`), checked and written as
/// `http://gpu1:3000`: a scheme other than http(s), a mistyped one (`htp:/gpu1`) or a path
/// (`…/dashboard`, which would turn every answer into a web page) is a usage error that says
/// what an address looks like, before anything is sent.
pub fn portal_url(url: &str) -> Result<String> {
    let typed = url.trim();
    let example = "the portal's address is its scheme, host and port, e.g. http://gpu1:3000";
    let normalized = normalize_url(typed);
    let bad = |why: String| Err(CliError::usage(format!("{typed:?} {why}: {example}")));
    match typed.split_once("://") {
        Some((scheme, _)) if !matches!(scheme, "http" | "https") => {
            return bad(format!("has scheme {scheme:?}"));
        }
        None if typed.contains(":/") => return bad("is not an address".into()),
        _ => {}
    }
    let with_scheme = if typed.contains("://") {
        typed.to_string()
    } else {
        format!("http://{typed}")
    };
    let parsed = match lanes_client::reqwest::Url::parse(&with_scheme) {
        Ok(parsed) => parsed,
        Err(e) => return bad(format!("is not an address ({e})")),
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return bad(format!("has scheme {:?}", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return bad("names no host".into());
    }
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        return bad(format!("has a path ({})", parsed.path()));
    }
    Ok(normalized)
}

fn reqwest_client() -> Result<lanes_client::reqwest::Client> {
    // The server's messages in the terminal's language (`LANG=zh_CN.UTF-8`: Chinese).
    let mut headers = lanes_client::reqwest::header::HeaderMap::new();
    if let Some(language) =
        accept_language(std::env::var("LC_ALL").ok(), std::env::var("LANG").ok())
    {
        if let Ok(value) = language.parse() {
            headers.insert(lanes_client::reqwest::header::ACCEPT_LANGUAGE, value);
        }
    }
    lanes_client::reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(30))
        // A password or token goes only to the portal it was meant for.
        .redirect(lanes_client::reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| CliError::usage(e.to_string()))
}

/// The `Accept-Language` of a POSIX locale (`zh_CN.UTF-8` → `zh-CN`), `LC_ALL` first; none
/// for `C`, `POSIX` or nothing set.
pub fn accept_language(lc_all: Option<String>, lang: Option<String>) -> Option<String> {
    let locale = lc_all.filter(|v| !v.is_empty()).or(lang)?;
    let tag = locale.split(['.', '@']).next()?.replace('_', "-");
    let plain = !tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    (plain && tag != "C" && tag != "POSIX").then_some(tag)
}

/// `host:port` or `http://host:port/` as `http://host:port`.
pub fn normalize_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    if url.starts_with("http://") || url.starts_with("https://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

/// A client of `url` with no credentials, for logging in.
pub fn anonymous(url: &str) -> Result<lanes_client::Client> {
    Ok(lanes_client::Client::with_http(
        portal_url(url)?,
        reqwest_client()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_terminal_locale_becomes_the_accepted_language() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(accept_language(None, s("zh_CN.UTF-8")), s("zh-CN"));
        assert_eq!(
            accept_language(s("en_GB.utf8"), s("zh_CN.UTF-8")),
            s("en-GB")
        );
        assert_eq!(accept_language(s(""), s("de_DE@euro")), s("de-DE"));
        assert_eq!(accept_language(None, s("C.UTF-8")), None);
        assert_eq!(accept_language(None, s("POSIX")), None);
        assert_eq!(accept_language(None, None), None);
    }

    #[test]
    fn urls_gain_a_scheme_and_lose_the_trailing_slash() {
        assert_eq!(normalize_url("gpu1:3000/"), "http://gpu1:3000");
        assert_eq!(normalize_url("https://lanes.lab/"), "https://lanes.lab");
        assert_eq!(portal_url(" gpu1:3000/").unwrap(), "http://gpu1:3000");
        assert_eq!(
            portal_url("https://lanes.lab").unwrap(),
            "https://lanes.lab"
        );
    }

    #[test]
    fn an_address_that_is_not_a_portals_is_refused_before_anything_is_sent() {
        for (typed, why) in [
            ("htp:/gpu1:3000", "is not an address"),
            ("ftp://gpu1", "has scheme \"ftp\""),
            ("http://gpu1:3000/dashboard", "has a path (/dashboard)"),
            ("http://gpu1:3000/?range=1h", "has a path"),
            ("http://", "is not an address"),
        ] {
            let refused = portal_url(typed).unwrap_err();
            assert_eq!(refused.exit_code(), 2);
            let text = refused.to_string();
            assert!(
                text.contains(why) && text.contains("e.g. http://gpu1:3000"),
                "{typed}: {text}"
            );
        }
    }

    #[test]
    fn a_config_round_trips_through_toml() {
        let config = Config {
            url: "http://gpu1:3000".into(),
            token: "lanes_abc".into(),
            token_id: Some(3),
            username: Some("alice".into()),
        };
        let text = toml::to_string(&config).unwrap();
        assert_eq!(toml::from_str::<Config>(&text).unwrap(), config);
    }
}
