//! The web assets (the hydrate bundle, its stylesheet, the public files), held in memory:
//! embedded in the release binary (build.rs), or read once from `--site-root`. The bundle is
//! served under `/pkg/VERSION/`, VERSION being the hash of every asset, with a year's
//! immutable caching: a new build is a new address, so a browser never mixes two builds. Other
//! files get an ETag and `no-cache`. Brotli and gzip copies made at build time are served to
//! browsers that take them.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/site.rs"));
}

/// More than this under `--site-root` is not a site (a mistyped `/`, say).
const MAX_SITE_BYTES: u64 = 256 << 20;

/// Where the assets came from, as `lanes config check` and the startup log say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Embedded,
    Directory(PathBuf),
    /// A build without embedded assets and no `--site-root`: pages render but do not hydrate.
    Missing,
}

#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("--site-root {0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("--site-root {0}: over {MAX_SITE_BYTES} bytes; is it the built site (target/site)?")]
    TooLarge(PathBuf),
    #[error("--site-root {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Clone, Debug)]
struct Asset {
    identity: Bytes,
    brotli: Option<Bytes>,
    gzip: Option<Bytes>,
    content_type: &'static str,
    etag: HeaderValue,
}

#[derive(Clone, Debug)]
pub struct Site {
    files: HashMap<String, Asset>,
    version: String,
    origin: Origin,
}

impl Site {
    /// The assets from `dir`, or else those embedded in this binary.
    pub fn load(dir: Option<&Path>) -> Result<Self, SiteError> {
        match dir {
            Some(dir) => Self::from_dir(dir),
            None if embedded::FILES.is_empty() => Ok(Self::from_files(Vec::new(), Origin::Missing)),
            None => Ok(Self::from_files(
                embedded::FILES
                    .iter()
                    .map(|(name, body)| (name.to_string(), Bytes::from_static(body)))
                    .collect(),
                Origin::Embedded,
            )),
        }
    }

    fn from_dir(dir: &Path) -> Result<Self, SiteError> {
        if !dir.is_dir() {
            return Err(SiteError::NotADirectory(dir.to_path_buf()));
        }
        let mut files = Vec::new();
        let mut total = 0;
        read_tree(dir, dir, &mut files, &mut total)?;
        Ok(Self::from_files(
            files,
            Origin::Directory(dir.to_path_buf()),
        ))
    }

    fn from_files(files: Vec<(String, Bytes)>, origin: Origin) -> Self {
        let names: std::collections::HashSet<&str> =
            files.iter().map(|(name, _)| name.as_str()).collect();
        let variant_of = |name: &str, suffix: &str| {
            name.strip_suffix(suffix)
                .filter(|base| names.contains(base))
                .map(str::to_string)
        };
        let mut assets: HashMap<String, Asset> = HashMap::new();
        let mut variants = Vec::new();
        // Each asset's digest, by name: its ETag, and (all of them, in order) the version.
        let mut digests = std::collections::BTreeMap::new();
        for (name, body) in &files {
            if let Some(base) = variant_of(name, ".br") {
                variants.push((base, true, body.clone()));
            } else if let Some(base) = variant_of(name, ".gz") {
                variants.push((base, false, body.clone()));
            } else {
                let digest = Sha256::digest(body);
                let etag = format!("W/\"{}\"", hex(&digest[..12]));
                assets.insert(
                    name.clone(),
                    Asset {
                        identity: body.clone(),
                        brotli: None,
                        gzip: None,
                        content_type: content_type(name),
                        etag: HeaderValue::from_str(&etag).expect("hex is a valid header"),
                    },
                );
                digests.insert(name.as_str(), digest);
            }
        }
        for (base, brotli, body) in variants {
            if let Some(asset) = assets.get_mut(&base) {
                if brotli {
                    asset.brotli = Some(body);
                } else {
                    asset.gzip = Some(body);
                }
            }
        }
        let mut hasher = Sha256::new();
        for (name, digest) in &digests {
            hasher.update(name.as_bytes());
            hasher.update([0]);
            hasher.update(digest);
        }
        let version = if digests.is_empty() {
            "none".to_string()
        } else {
            hex(&hasher.finalize()[..8])
        };
        Self {
            files: assets,
            version,
            origin,
        }
    }

    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The bundle's folder as pages name it (Leptos' `site_pkg_dir`): `pkg/VERSION`.
    pub fn pkg_dir(&self) -> String {
        format!("pkg/{}", self.version)
    }

    /// The bundle's split manifest (`cargo xtask site` writes it): for each lazy route, the
    /// chunks it loads. Empty for a site without one.
    pub fn split_manifest(&self) -> HashMap<String, Vec<String>> {
        self.files
            .get("pkg/__wasm_split_manifest.json")
            .and_then(|asset| serde_json::from_slice(&asset.identity).ok())
            .unwrap_or_default()
    }

    /// The response for a request of an asset, or `None` when there is no such asset.
    pub fn respond(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Option<Response<Body>> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        let path = path.trim_start_matches('/');
        let (name, immutable) = match path.strip_prefix("pkg/") {
            Some(rest) => match rest
                .strip_prefix(&self.version)
                .and_then(|r| r.strip_prefix('/'))
            {
                Some(file) => (format!("pkg/{file}"), true),
                // The unversioned address works too (scripts, curl), but is not cached blind.
                None => (path.to_string(), false),
            },
            None => (path.to_string(), false),
        };
        let asset = self.files.get(&name)?;
        let cache = if immutable {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        };
        let mut response = Response::builder()
            .header(header::CACHE_CONTROL, cache)
            .header(header::ETAG, asset.etag.clone());
        if asset.brotli.is_some() || asset.gzip.is_some() {
            response = response.header(header::VARY, "accept-encoding");
        }
        let fresh = headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|tag| {
                let tag = tag.trim();
                tag == "*" || weak_eq(tag, asset.etag.to_str().unwrap_or_default())
            });
        if fresh {
            return response
                .status(StatusCode::NOT_MODIFIED)
                .body(Body::empty())
                .ok();
        }
        let accepted = Accepted::parse(headers);
        let (body, encoding) = match (&asset.brotli, &asset.gzip) {
            (Some(br), _) if accepted.brotli => (br.clone(), Some("br")),
            (_, Some(gz)) if accepted.gzip => (gz.clone(), Some("gzip")),
            _ => (asset.identity.clone(), None),
        };
        if let Some(encoding) = encoding {
            response = response.header(header::CONTENT_ENCODING, encoding);
        }
        response = response
            .header(header::CONTENT_TYPE, asset.content_type)
            .header(header::CONTENT_LENGTH, body.len());
        let body = if method == Method::HEAD {
            Body::empty()
        } else {
            Body::from(body)
        };
        response.body(body).ok()
    }
}

/// ETags compared the weak way (RFC 9110 §8.8.3.2), as If-None-Match asks.
fn weak_eq(a: &str, b: &str) -> bool {
    a.trim_start_matches("W/") == b.trim_start_matches("W/")
}

/// Which of our two encodings the request's Accept-Encoding takes (a `q=0` refuses one).
#[derive(Debug, Default, PartialEq)]
struct Accepted {
    brotli: bool,
    gzip: bool,
}

impl Accepted {
    fn parse(headers: &HeaderMap) -> Self {
        let mut accepted = Self::default();
        let mut wildcard = None;
        let (mut brotli, mut gzip) = (None, None);
        for item in headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
        {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let weight = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let takes = weight > 0.0;
            match coding.as_str() {
                "br" => brotli = Some(takes),
                "gzip" | "x-gzip" => gzip = Some(takes),
                "*" => wildcard = Some(takes),
                _ => {}
            }
        }
        accepted.brotli = brotli.or(wildcard).unwrap_or(false);
        accepted.gzip = gzip.or(wildcard).unwrap_or(false);
        accepted
    }
}

fn read_tree(
    root: &Path,
    dir: &Path,
    files: &mut Vec<(String, Bytes)>,
    total: &mut u64,
) -> Result<(), SiteError> {
    let read = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SiteError::Read { path, source }
    };
    for entry in std::fs::read_dir(dir).map_err(read(dir))? {
        let entry = entry.map_err(read(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(read(&path))?;
        if kind.is_dir() {
            read_tree(root, &path, files, total)?;
        } else if kind.is_file() {
            *total += entry.metadata().map_err(read(&path))?.len();
            if *total > MAX_SITE_BYTES {
                return Err(SiteError::TooLarge(root.to_path_buf()));
            }
            let body = std::fs::read(&path).map_err(read(&path))?;
            if let Ok(rel) = path.strip_prefix(root) {
                files.push((rel.to_string_lossy().replace('\\', "/"), Bytes::from(body)));
            }
        }
    }
    Ok(())
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("html") => "text/html; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        Site::from_files(
            vec![
                ("pkg/lanes.js".into(), Bytes::from_static(b"js")),
                ("pkg/lanes.js.br".into(), Bytes::from_static(b"js-br")),
                ("pkg/lanes.js.gz".into(), Bytes::from_static(b"js-gz")),
                ("favicon.svg".into(), Bytes::from_static(b"<svg/>")),
                (
                    "notes.gz".into(),
                    Bytes::from_static(b"a gzip file of its own"),
                ),
            ],
            Origin::Missing,
        )
    }

    fn get(site: &Site, path: &str, headers: &[(&str, &str)]) -> Option<Response<Body>> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        site.respond(&Method::GET, path, &map)
    }

    fn header_of(response: &Response<Body>, name: header::HeaderName) -> &str {
        response
            .headers()
            .get(name)
            .map_or("", |v| v.to_str().unwrap())
    }

    #[test]
    fn the_versioned_bundle_is_cached_for_a_year_and_other_files_revalidate() {
        let site = site();
        let path = format!("/{}/lanes.js", site.pkg_dir());
        let bundle = get(&site, &path, &[]).unwrap();
        assert_eq!(
            header_of(&bundle, header::CACHE_CONTROL),
            "public, max-age=31536000, immutable"
        );
        assert_eq!(
            header_of(&bundle, header::CONTENT_TYPE),
            "text/javascript; charset=utf-8"
        );
        let icon = get(&site, "/favicon.svg", &[]).unwrap();
        assert_eq!(header_of(&icon, header::CACHE_CONTROL), "no-cache");
        let unversioned = get(&site, "/pkg/lanes.js", &[]).unwrap();
        assert_eq!(header_of(&unversioned, header::CACHE_CONTROL), "no-cache");
        assert!(get(&site, "/pkg/0123456789abcdef/lanes.js", &[]).is_none());
        assert!(get(&site, "/missing.css", &[]).is_none());
    }

    #[test]
    fn the_split_manifest_names_each_lazy_routes_chunks() {
        assert!(site().split_manifest().is_empty());
        let split = Site::from_files(
            vec![(
                "pkg/__wasm_split_manifest.json".into(),
                Bytes::from_static(
                    br#"{"__calendar_view_1": ["chunk_3", "split___calendar_view_1"]}"#,
                ),
            )],
            Origin::Missing,
        );
        assert_eq!(
            split.split_manifest()["__calendar_view_1"],
            vec!["chunk_3", "split___calendar_view_1"]
        );
    }

    #[test]
    fn the_version_changes_with_any_asset() {
        let a = site();
        let b = Site::from_files(
            vec![("pkg/lanes.js".into(), Bytes::from_static(b"js2"))],
            Origin::Missing,
        );
        assert_ne!(a.pkg_dir(), b.pkg_dir());
        assert_eq!(a.pkg_dir(), site().pkg_dir());
        assert_eq!(
            Site::from_files(vec![], Origin::Missing).pkg_dir(),
            "pkg/none"
        );
    }

    #[test]
    fn the_precompressed_copy_the_browser_prefers_is_served() {
        let site = site();
        let br = get(
            &site,
            "/pkg/lanes.js",
            &[("accept-encoding", "gzip, deflate, br")],
        )
        .unwrap();
        assert_eq!(header_of(&br, header::CONTENT_ENCODING), "br");
        assert_eq!(header_of(&br, header::CONTENT_LENGTH), "5");
        assert_eq!(header_of(&br, header::VARY), "accept-encoding");
        let gz = get(
            &site,
            "/pkg/lanes.js",
            &[("accept-encoding", "br;q=0, gzip")],
        )
        .unwrap();
        assert_eq!(header_of(&gz, header::CONTENT_ENCODING), "gzip");
        let plain = get(&site, "/pkg/lanes.js", &[]).unwrap();
        assert_eq!(header_of(&plain, header::CONTENT_ENCODING), "");
        assert_eq!(header_of(&plain, header::CONTENT_LENGTH), "2");
        let any = get(&site, "/pkg/lanes.js", &[("accept-encoding", "*")]).unwrap();
        assert_eq!(header_of(&any, header::CONTENT_ENCODING), "br");
        // A .gz file with no original beside it is a file like any other.
        let own = get(&site, "/notes.gz", &[("accept-encoding", "gzip")]).unwrap();
        assert_eq!(header_of(&own, header::CONTENT_ENCODING), "");
    }

    #[test]
    fn a_matching_etag_answers_not_modified() {
        let site = site();
        let first = get(&site, "/favicon.svg", &[]).unwrap();
        let etag = header_of(&first, header::ETAG).to_string();
        assert!(etag.starts_with("W/\""), "{etag}");
        let again = get(&site, "/favicon.svg", &[("if-none-match", &etag)]).unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        let other = get(&site, "/favicon.svg", &[("if-none-match", "\"other\"")]).unwrap();
        assert_eq!(other.status(), StatusCode::OK);
    }

    #[test]
    fn only_reads_are_answered() {
        let site = site();
        assert!(site
            .respond(&Method::POST, "/favicon.svg", &HeaderMap::new())
            .is_none());
        let head = site
            .respond(&Method::HEAD, "/favicon.svg", &HeaderMap::new())
            .unwrap();
        assert_eq!(header_of(&head, header::CONTENT_LENGTH), "6");
    }

    #[test]
    fn a_site_root_that_is_no_site_is_refused() {
        let missing = Site::load(Some(Path::new("/nonexistent/site")));
        assert!(matches!(missing, Err(SiteError::NotADirectory(_))));
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pkg")).unwrap();
        std::fs::write(dir.path().join("pkg/lanes.css"), "body{}").unwrap();
        let site = Site::load(Some(dir.path())).unwrap();
        assert_eq!(site.origin(), &Origin::Directory(dir.path().to_path_buf()));
        assert!(get(&site, "/pkg/lanes.css", &[]).is_some());
    }
}
