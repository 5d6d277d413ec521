//! HTTP for the build sources: one agent (the system's CA bundle, bounded waits), the rule for which URLs may be
//! fetched at all, and a streaming download that hashes as it writes, stops at a size cap and can be cancelled.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

/// An HTTPS agent trusting the system's CA bundle (`SSL_CERT_FILE`, else Debian's
/// /etc/ssl/certs/ca-certificates.crt): a proxy with its own CA, as on the CI machines, is then trusted the way
/// curl and pip trust it. Without a readable bundle, the built-in web PKI roots.
pub fn agent() -> ureq::Agent {
    use ureq::tls::{RootCerts, TlsConfig};
    let bundle = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
    let roots = crate::host::inputs::read_limited(&bundle, 16 << 20)
        .ok()
        .map(|pem| {
            ureq::tls::parse_pem(&pem)
                .filter_map(Result::ok)
                .filter_map(|item| match item {
                    ureq::tls::PemItem::Certificate(c) => Some(c),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .filter(|certs| !certs.is_empty())
        .map(|certs| RootCerts::Specific(std::sync::Arc::new(certs)))
        .unwrap_or(RootCerts::WebPki);
    ureq::Agent::config_builder()
        .tls_config(TlsConfig::builder().root_certs(roots).build())
        .user_agent(concat!("backscope/", env!("CARGO_PKG_VERSION")))
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_per_read(Some(Duration::from_secs(120)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// A URL that decides what is downloaded and run must be https, or http to this machine (a local mirror, the
/// tests' server): the network between must not be able to change it. `what` names the URL in the error.
pub fn check_url(url: &str, what: &str) -> anyhow::Result<()> {
    if url.starts_with("https://") {
        return Ok(());
    }
    let local = url.strip_prefix("http://").is_some_and(|rest| {
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    });
    if !local {
        bail!("{what} {url:?}: expected https://…, or http:// to this machine (127.0.0.1, localhost, [::1])");
    }
    Ok(())
}

/// What a download came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// The body, written whole: its size and lowercase hex SHA-256.
    File { size: u64, sha256: String },
    /// The server has no such file (HTTP 404 or 410).
    Absent { status: u16 },
}

/// The body of `url` written to `dest` (created; removed again unless the download finished), at most `cap`
/// bytes, hashed as it streams. `cancel` stops it between reads. Another status than 200, 404 and 410, a body
/// over the cap or a broken connection is an error.
pub fn download(agent: &ureq::Agent, url: &str, dest: &Path, cap: u64, cancel: &AtomicBool) -> anyhow::Result<Got> {
    let resp = agent.get(url).call().with_context(|| format!("GET {url}"))?;
    let status = resp.status().as_u16();
    if status == 404 || status == 410 {
        return Ok(Got::Absent { status });
    }
    if status != 200 {
        bail!("GET {url}: HTTP {status}");
    }
    let mut reader = resp.into_body().into_with_config().limit(cap.saturating_add(1)).reader();
    let mut out = File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
    let result = (|| -> anyhow::Result<Got> {
        let mut hash = Sha256::new();
        let mut total = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            if cancel.load(Ordering::Relaxed) {
                bail!("GET {url}: cancelled");
            }
            let n = reader.read(&mut buf).with_context(|| format!("GET {url}: reading the body"))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > cap {
                bail!("GET {url}: larger than {cap} bytes");
            }
            hash.update(&buf[..n]);
            out.write_all(&buf[..n]).with_context(|| format!("writing {}", dest.display()))?;
        }
        out.sync_all().with_context(|| format!("writing {}", dest.display()))?;
        Ok(Got::File { size: total, sha256: super::cache::hex(&hash.finalize()) })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(dest);
    }
    result
}

/// Whether `url` answers with a file: the status of a GET whose body is not read (a one-byte range is asked for;
/// a server that ignores it still sends only the headers before the connection is dropped). Some release hosts
/// redirect to storage that signs URLs for GET only, so a HEAD request is not used.
pub fn exists(agent: &ureq::Agent, url: &str) -> anyhow::Result<bool> {
    let resp = agent.get(url).header("Range", "bytes=0-0").call().with_context(|| format!("GET {url}"))?;
    match resp.status().as_u16() {
        200 | 206 => Ok(true),
        404 | 410 => Ok(false),
        other => bail!("GET {url}: HTTP {other}"),
    }
}

/// A small text file (a checksum list), or none when the server has no such file.
pub fn get_small(agent: &ureq::Agent, url: &str, cap: u64) -> anyhow::Result<Option<Vec<u8>>> {
    let resp = agent.get(url).call().with_context(|| format!("GET {url}"))?;
    match resp.status().as_u16() {
        200 => {}
        404 | 410 => return Ok(None),
        other => bail!("GET {url}: HTTP {other}"),
    }
    read_capped(resp, url, cap).map(Some)
}

/// The body of a response to `url`, read whole up to `cap` bytes (more is an error, not an allocation).
pub fn read_capped(resp: ureq::http::Response<ureq::Body>, url: &str, cap: u64) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    resp.into_body()
        .into_with_config()
        .limit(cap)
        .reader()
        .read_to_end(&mut body)
        .with_context(|| format!("GET {url}: reading the body (cap {cap} bytes)"))?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_https_or_local_http() {
        for ok in
            ["https://x/y", "http://127.0.0.1:8080/x", "http://localhost/x", "http://[::1]:1/x", "http://127.9.9.9/"]
        {
            check_url(ok, "URL").unwrap();
        }
        for bad in ["http://pypi.org/x", "http://127.0.0.1.evil.example/x", "ftp://x/y", "file:///etc/passwd", ""] {
            let e = check_url(bad, "release URL").unwrap_err().to_string();
            assert!(e.starts_with("release URL"), "{e}");
        }
    }
}
