//! Mutual TLS between relay and proxy: a private CA, one proxy and one relay certificate.
//!
//! Every subflow is TLS 1.3 with certificates checked in both directions:
//!
//! * the **proxy** presents `proxy.pem` (extended key usage serverAuth, DNS name
//!   [`PROXY_SERVER_NAME`]) and requires a client certificate signed by the CA with clientAuth;
//! * the **relay** trusts only the CA (never the system roots), always verifies the name
//!   [`PROXY_SERVER_NAME`] whatever IP address a path uses to reach the proxy, and presents
//!   `relay.pem` (clientAuth, name `polycorn-relay`).
//!
//! **One certificate per train.** [`issue_relay`] signs a further relay certificate with the
//! CA of a set, named after the train (`polycorn tls relay --name train-042 ./creds`). The proxy
//! reads that name from the certificate each subflow presents ([`relay_name`]): it labels the
//! session's logs and per-path metrics, binds the session to it (a subflow of another relay
//! cannot join), and a name listed in `proxy.revoked_relays` is refused in the handshake with
//! the alert `certificate_revoked` ([`server_config_revoking`], [`Revoked`]; applied on SIGHUP
//! while running, cutting the relay's live subflows) — so one lost gateway is shut out without
//! redistributing every file, and its relay can say why. The set's own `relay.pem` is named
//! [`RELAY_NAME`].
//!
//! Because the key usages differ, the proxy's key cannot pose as a relay and the relay's key
//! cannot pose as a proxy. Both sides negotiate ALPN [`ALPN`] (`polycorn/1`).
//!
//! # Files
//!
//! [`generate`] writes, into one directory:
//!
//! | file | goes to | secret |
//! |---|---|---|
//! | `ca.pem` | relay and proxy | no |
//! | `ca.key` | **nowhere: keep it offline** | yes |
//! | `proxy.pem`, `proxy.key` | proxy | key |
//! | `relay.pem`, `relay.key` | relay (train) | key |
//!
//! `ca.key` signs certificates; whoever holds it can make a relay the proxy accepts. It must
//! never be copied to a train: a gateway is physically exposed. Keep it on the operator's
//! workstation or offline, and use it only to issue new certificates. Keys are written with
//! mode 0600.
//!
//! Certificates are valid from 1970-01-01 (a gateway without a real-time clock may boot with
//! its clock at the epoch, before GPS or NTP set it; validity start buys no security in a
//! private PKI) until ten years after generation. To rotate, run `generate` again with
//! `force` and distribute every file again (the CA changes too).
//!
//! # Loading
//!
//! [`server_config`] and [`client_config`] read PEM files and fail with a [`TlsError`] naming
//! the file and what is wrong with it: missing, not PEM, no key in it, key not matching the
//! certificate. They build on the `ring` provider explicitly, so no process-wide default
//! provider has to be installed.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::UnixTime;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
/// The TLS configurations this module builds (also for [`Live`] outside this crate).
pub use rustls::{ClientConfig, ServerConfig};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The DNS name in the proxy's certificate, and the name relays always verify.
pub const PROXY_SERVER_NAME: &str = "polycorn-proxy";

/// The common name and DNS name of the relay's certificate.
pub const RELAY_NAME: &str = "polycorn-relay";

/// The ALPN protocol both ends offer.
pub const ALPN: &[u8] = b"polycorn/1";

/// Validity of generated certificates, in years from generation.
pub const VALIDITY_YEARS: i32 = 10;

/// The file names [`generate`] writes.
pub const FILES: [&str; 6] = [
    "ca.pem",
    "ca.key",
    "proxy.pem",
    "proxy.key",
    "relay.pem",
    "relay.key",
];

/// What went wrong with TLS material. Every variant names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file does not exist.
    #[error("{}: file not found", file.display())]
    Missing {
        /// The file.
        file: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("{}: cannot read: {cause}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error (in the message, so not also the error's source).
        cause: io::Error,
    },
    /// The file holds no PEM section of the expected kind.
    #[error("{}: not a PEM file with a {expected} (expected a -----BEGIN {expected}----- section)", file.display())]
    NotPem {
        /// The file.
        file: PathBuf,
        /// What was expected (`CERTIFICATE`).
        expected: &'static str,
    },
    /// The file is PEM but malformed.
    #[error("{}: malformed PEM: {detail}", file.display())]
    BadPem {
        /// The file.
        file: PathBuf,
        /// What the parser said.
        detail: String,
    },
    /// The file holds no private key.
    #[error("{}: no private key found (expected a -----BEGIN PRIVATE KEY----- section)", file.display())]
    NoKey {
        /// The file.
        file: PathBuf,
    },
    /// The private key does not belong to the certificate.
    #[error("{}: private key does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// A certificate or key the TLS library refuses (unsupported algorithm, bad encoding).
    #[error("{}: {source}", file.display())]
    Rejected {
        /// The file.
        file: PathBuf,
        /// The TLS library's reason.
        source: rustls::Error,
    },
    /// The CA file cannot serve as a trust anchor.
    #[error("{}: not a usable CA certificate: {detail}", file.display())]
    BadCa {
        /// The CA file.
        file: PathBuf,
        /// Why.
        detail: String,
    },
    /// A file [`generate`], [`issue_relay`] or [`issue_proxy`] would write already exists.
    #[error("{}: already exists; refusing to overwrite ({hint})", file.display())]
    Exists {
        /// The file.
        file: PathBuf,
        /// What to do instead.
        hint: &'static str,
    },
    /// Writing a generated file failed.
    #[error("{}: cannot write: {source}", file.display())]
    Write {
        /// The file or directory.
        file: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// An extra subject alternative name is neither an IP address nor a DNS name.
    #[error("proxy SAN `{san}` is neither an IP address nor a valid DNS name")]
    InvalidSan {
        /// The name as given.
        san: String,
    },
    /// A relay name [`issue_relay`] cannot put in a certificate.
    #[error("relay name `{name}`: {why}")]
    InvalidRelayName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The CA key does not belong to the CA certificate (files of two different sets).
    #[error("{}: not the key of the CA certificate {} (are they from the same `tls generate`?)", key.display(), cert.display())]
    CaKeyMismatch {
        /// `ca.pem`.
        cert: PathBuf,
        /// `ca.key`.
        key: PathBuf,
    },
    /// Certificate generation failed.
    #[error("generating {what}: {source}")]
    Generate {
        /// Which certificate or key.
        what: &'static str,
        /// rcgen's error.
        source: rcgen::Error,
    },
}

/// The files [`generate`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// `ca.pem`: trust anchor for both ends.
    pub ca_cert: PathBuf,
    /// `ca.key`: keep offline, never on a train.
    pub ca_key: PathBuf,
    /// `proxy.pem`.
    pub proxy_cert: PathBuf,
    /// `proxy.key`.
    pub proxy_key: PathBuf,
    /// `relay.pem`.
    pub relay_cert: PathBuf,
    /// `relay.key`.
    pub relay_key: PathBuf,
}

/// What an existing file that issuing one more certificate would overwrite asks for.
const ISSUE_HINT: &str = "--force replaces it; --out writes the new files elsewhere";

/// The files [`issue_relay`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedRelay {
    /// `NAME.pem`: the relay certificate, common name and DNS name `NAME`.
    pub cert: PathBuf,
    /// `NAME.key` (mode 0600).
    pub key: PathBuf,
}

/// Longest relay name (one DNS label).
pub const MAX_RELAY_NAME: usize = 63;

/// Checks a relay name: 1–[`MAX_RELAY_NAME`] characters of `a-z`, `0-9` and `-`, not starting or
/// ending with `-` (a DNS label, so it fits the certificate's DNS name and needs no escaping in
/// logs, metrics labels or file names).
pub fn check_relay_name(name: &str) -> Result<(), TlsError> {
    let bad = |why| {
        Err(TlsError::InvalidRelayName {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_RELAY_NAME {
        return bad("longer than 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("only a-z, 0-9 and '-' are allowed");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return bad("must not start or end with '-'");
    }
    Ok(())
}

/// Signs a certificate for the relay `name` with the CA in `ca_dir` (`ca.pem`, `ca.key`), and
/// writes `NAME.pem` and `NAME.key` into `out` (created, mode 0700, if missing).
///
/// The certificate is like the set's `relay.pem` (client authentication only, same validity)
/// with `name` as its common name and DNS name. Existing files are an error unless `force`;
/// nothing is written then. `ca.key` must belong to `ca.pem`.
pub fn issue_relay(
    ca_dir: &Path,
    name: &str,
    out: &Path,
    force: bool,
) -> Result<IssuedRelay, TlsError> {
    issue_relay_valid_for(ca_dir, name, out, force, None)
}

/// [`issue_relay`], the certificate valid until `days` days from today (UTC midnight) when
/// given, for fleets that renew their trains' certificates on a schedule.
pub fn issue_relay_valid_for(
    ca_dir: &Path,
    name: &str,
    out: &Path,
    force: bool,
    days: Option<u32>,
) -> Result<IssuedRelay, TlsError> {
    check_relay_name(name)?;
    let params = relay_params(name).map_err(|source| TlsError::Generate {
        what: "relay name",
        source,
    })?;
    let paths = [
        out.join(format!("{name}.pem")),
        out.join(format!("{name}.key")),
    ];
    let [cert, key] = issue(
        ca_dir,
        params,
        paths,
        force,
        days,
        ["relay key", "relay certificate"],
    )?;
    Ok(IssuedRelay { cert, key })
}

/// Signs `params` (valid for `days` from today if given) with a new key, by the CA in `ca_dir`,
/// and writes certificate and key to `paths` (existing files are an error unless `force`).
/// `what` names the key and the certificate in errors.
fn issue(
    ca_dir: &Path,
    mut params: CertificateParams,
    paths: [PathBuf; 2],
    force: bool,
    days: Option<u32>,
    what: [&'static str; 2],
) -> Result<[PathBuf; 2], TlsError> {
    let (issuer, ca_key) = load_issuer(ca_dir)?;
    if !force {
        if let Some(existing) = paths.iter().find(|p| p.symlink_metadata().is_ok()) {
            return Err(TlsError::Exists {
                file: existing.clone(),
                hint: ISSUE_HINT,
            });
        }
    }
    let gen = |what| move |source| TlsError::Generate { what, source };
    let key = KeyPair::generate().map_err(gen(what[0]))?;
    if let Some(days) = days {
        end_in_days(&mut params, days);
    }
    let cert = params
        .signed_by(&key, &issuer, &ca_key)
        .map_err(gen(what[1]))?;
    if let Some(dir) = paths[0].parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    write_file(&paths[0], cert.pem().as_bytes(), false, force)?;
    write_file(&paths[1], key.serialize_pem().as_bytes(), true, force)?;
    Ok(paths)
}

/// The CA of `ca_dir` (`ca.pem`, `ca.key`, as [`generate`] wrote them) as rcgen's issuer: same
/// name, key and key identifier as `ca.pem`, so what it signs chains to the file every relay
/// and proxy already trusts. Errors name the file (a key that is not the certificate's too).
fn load_issuer(ca_dir: &Path) -> Result<(rcgen::Certificate, KeyPair), TlsError> {
    let (ca_pem, ca_key_file) = (ca_dir.join("ca.pem"), ca_dir.join("ca.key"));
    let ca_der = load_certs(&ca_pem)?.swap_remove(0);
    let ca_key_text = String::from_utf8(read(&ca_key_file)?).map_err(|_| TlsError::NoKey {
        file: ca_key_file.clone(),
    })?;
    let ca_key = KeyPair::from_pem(&ca_key_text).map_err(|_| TlsError::NoKey {
        file: ca_key_file.clone(),
    })?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(&ca_der).map_err(|e| TlsError::BadCa {
            file: ca_pem.clone(),
            detail: e.to_string(),
        })?;
    if parsed.public_key().subject_public_key.data.as_ref() != ca_key.public_key_raw() {
        return Err(TlsError::CaKeyMismatch {
            cert: ca_pem,
            key: ca_key_file,
        });
    }
    let ca_params = CertificateParams::from_ca_cert_der(&ca_der).map_err(|e| TlsError::BadCa {
        file: ca_pem.clone(),
        detail: e.to_string(),
    })?;
    let issuer = ca_params
        .self_signed(&ca_key)
        .map_err(|source| TlsError::Generate {
            what: "CA certificate",
            source,
        })?;
    Ok((issuer, ca_key))
}

/// Makes `params` valid until `days` from today (UTC midnight).
fn end_in_days(params: &mut CertificateParams, days: u32) {
    let (y, m, d) = civil_from_days(unix_now().div_euclid(86_400) + i64::from(days));
    params.not_after = rcgen::date_time_ymd(y, m as u8, d as u8);
}

/// The files [`issue_proxy`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedProxy {
    /// `proxy.pem`.
    pub cert: PathBuf,
    /// `proxy.key` (mode 0600).
    pub key: PathBuf,
}

/// Signs a new proxy certificate and key with the CA in `ca_dir` and writes them to `out` as
/// `proxy.pem` and `proxy.key`: to renew the proxy's certificate (or give a second proxy its
/// own) without a new CA, so no train needs new files. Names as [`generate`] (`proxy_san`
/// besides [`PROXY_SERVER_NAME`]); valid for `days` from today, or until 1 January
/// [`VALIDITY_YEARS`] on. Existing files are an error unless `force`.
pub fn issue_proxy(
    ca_dir: &Path,
    proxy_san: &[String],
    out: &Path,
    force: bool,
    days: Option<u32>,
) -> Result<IssuedProxy, TlsError> {
    let params = proxy_params(proxy_sans(proxy_san)?);
    let paths = [out.join("proxy.pem"), out.join("proxy.key")];
    let [cert, key] = issue(
        ca_dir,
        params,
        paths,
        force,
        days,
        ["proxy key", "proxy certificate"],
    )?;
    Ok(IssuedProxy { cert, key })
}

/// The proxy certificate's names: [`PROXY_SERVER_NAME`] and every entry of `proxy_san` (an IP
/// address or a DNS name; anything else is an error).
fn proxy_sans(proxy_san: &[String]) -> Result<Vec<SanType>, TlsError> {
    let mut sans = vec![SanType::DnsName(
        PROXY_SERVER_NAME.try_into().expect("constant is ASCII"),
    )];
    for san in proxy_san {
        let invalid = || TlsError::InvalidSan { san: san.clone() };
        match ServerName::try_from(san.as_str()).map_err(|_| invalid())? {
            ServerName::IpAddress(ip) => sans.push(SanType::IpAddress(std::net::IpAddr::from(ip))),
            ServerName::DnsName(name) => sans.push(SanType::DnsName(
                name.as_ref().try_into().map_err(|_| invalid())?,
            )),
            _ => return Err(invalid()),
        }
    }
    Ok(sans)
}

/// A proxy certificate with names `sans`, for server authentication.
fn proxy_params(sans: Vec<SanType>) -> CertificateParams {
    let mut proxy = base_params(PROXY_SERVER_NAME);
    proxy.subject_alt_names = sans;
    proxy.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    proxy.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    proxy.use_authority_key_identifier_extension = true;
    proxy
}

/// The relay name a certificate carries: its subject's common name (`None` if it has none or
/// cannot be parsed). The proxy calls it on the certificate a subflow presented, which the
/// handshake has already verified.
pub fn relay_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The relay name in certificate file `file` (the relay labels its own metrics with it).
pub fn relay_name_of_file(file: &Path) -> Result<String, TlsError> {
    let certs = load_certs(file)?;
    relay_name(&certs[0]).ok_or_else(|| TlsError::BadPem {
        file: file.to_path_buf(),
        detail: "the certificate has no common name".into(),
    })
}

/// Creates a CA and the proxy and relay certificates it signs, in `dir` (created, mode 0700,
/// if missing).
///
/// The proxy certificate names [`PROXY_SERVER_NAME`] plus every entry of `proxy_san` (each an
/// IP address or a DNS name; anything else is an error). Existing files are an error naming
/// the first one found unless `force`; nothing is written in that case.
pub fn generate(dir: &Path, proxy_san: &[String], force: bool) -> Result<Generated, TlsError> {
    let paths: Vec<PathBuf> = FILES.iter().map(|f| dir.join(f)).collect();
    if !force {
        if let Some(existing) = paths.iter().find(|p| p.symlink_metadata().is_ok()) {
            return Err(TlsError::Exists {
                file: existing.clone(),
                hint: "use force to replace the whole set, then redistribute every file",
            });
        }
    }
    let sans = proxy_sans(proxy_san)?;
    let gen = |what| move |source| TlsError::Generate { what, source };

    let ca_key = KeyPair::generate().map_err(gen("CA key"))?;
    // A distinct CA name per set, so a certificate from another set fails as "unknown issuer"
    // rather than "bad signature". Bytes 1..5 of the uncompressed EC point are random.
    let tag: String = ca_key.public_key_raw()[1..5]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut ca = base_params(&format!("polycorn CA {tag}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(gen("CA certificate"))?;

    let proxy_key = KeyPair::generate().map_err(gen("proxy key"))?;
    let proxy_cert = proxy_params(sans)
        .signed_by(&proxy_key, &ca_cert, &ca_key)
        .map_err(gen("proxy certificate"))?;

    let relay_key = KeyPair::generate().map_err(gen("relay key"))?;
    let relay_cert = relay_params(RELAY_NAME)
        .map_err(gen("relay name"))?
        .signed_by(&relay_key, &ca_cert, &ca_key)
        .map_err(gen("relay certificate"))?;

    create_private_dir(dir)?;
    let contents = [
        (ca_cert.pem(), false),
        (ca_key.serialize_pem(), true),
        (proxy_cert.pem(), false),
        (proxy_key.serialize_pem(), true),
        (relay_cert.pem(), false),
        (relay_key.serialize_pem(), true),
    ];
    for (path, (text, secret)) in paths.iter().zip(contents.iter()) {
        write_file(path, text.as_bytes(), *secret, force)?;
    }
    let mut it = paths.into_iter();
    let mut next = || it.next().expect("six paths");
    Ok(Generated {
        ca_cert: next(),
        ca_key: next(),
        proxy_cert: next(),
        proxy_key: next(),
        relay_cert: next(),
        relay_key: next(),
    })
}

/// Validity (from 1970, see the module documentation, to [`VALIDITY_YEARS`] from now) and
/// subject (organization `polycorn`, common name `cn`) of every certificate made here.
fn base_params(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.not_before = rcgen::date_time_ymd(1970, 1, 1);
    p.not_after = rcgen::date_time_ymd(current_year() + VALIDITY_YEARS, 1, 1);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "polycorn");
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    p
}

/// A relay certificate named `name` (common name and DNS name), for client authentication.
fn relay_params(name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut p = base_params(name);
    p.subject_alt_names = vec![SanType::DnsName(name.try_into()?)];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    Ok(p)
}

/// Creates `dir` (and its parents) with mode 0700 if missing.
fn create_private_dir(dir: &Path) -> Result<(), TlsError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| TlsError::Write {
            file: dir.to_path_buf(),
            source,
        })
}

/// Writes one generated file: keys 0600, certificates 0644; `create_new` unless `force`.
fn write_file(path: &Path, bytes: &[u8], secret: bool, force: bool) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        file: path.to_path_buf(),
        source,
    };
    let mode = if secret { 0o600 } else { 0o644 };
    let mut opts = fs::OpenOptions::new();
    opts.write(true).mode(mode);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut file = opts.open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            TlsError::Exists {
                file: path.to_path_buf(),
                hint: "use force to overwrite it",
            }
        } else {
            err(e)
        }
    })?;
    // `mode` applies only to newly created files; an overwritten key keeps its old mode.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.sync_all().map_err(err)
}

/// The current UTC year from the system clock (1970 if the clock is before the epoch).
fn current_year() -> i32 {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0);
    civil_from_days(days as i64).0
}

/// The (proleptic Gregorian) UTC date `(year, month, day)` of a day counted from 1970-01-01,
/// within the years -9999..=9999 (a day beyond them gives the first or last day of that range).
pub(crate) fn civil_from_days(days: i64) -> (i32, u32, u32) {
    let epoch = time::OffsetDateTime::UNIX_EPOCH.date().to_julian_day();
    let date = i32::try_from(i64::from(epoch) + days)
        .ok()
        .and_then(|jd| time::Date::from_julian_day(jd).ok())
        .unwrap_or(if days < 0 {
            time::Date::MIN
        } else {
            time::Date::MAX
        });
    (
        date.year(),
        u32::from(u8::from(date.month())),
        u32::from(date.day()),
    )
}

/// A certificate file's validity warns this long before it ends.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 86_400);

/// When the certificates of a file stop being valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The configuration key (`tls.cert`, `tls.ca`).
    pub key: &'static str,
    /// The file.
    pub file: PathBuf,
    /// The earliest end of validity (`notAfter`) among the file's certificates, in seconds
    /// since 1970 (UTC).
    pub not_after: i64,
}

impl Validity {
    /// Seconds left at `now` (seconds since 1970); negative once it has ended.
    pub fn left(&self, now: i64) -> i64 {
        self.not_after - now
    }

    /// Whether an operator should be told at `now`: ended, or ending within
    /// [`EXPIRY_WARNING`].
    pub fn needs_warning(&self, now: i64) -> bool {
        self.left(now) < EXPIRY_WARNING.as_secs() as i64
    }

    /// `tls.cert (relay.pem): valid until 2036-01-01 (3685 days left)`, or `… ENDED on … (N
    /// days ago): renew it` once ended.
    pub fn describe(&self, now: i64) -> String {
        let (y, m, d) = civil_from_days(self.not_after.div_euclid(86_400));
        let days = self.left(now).div_euclid(86_400);
        let head = format!("{} ({})", self.key, self.file.display());
        if days < 0 || self.left(now) <= 0 {
            format!(
                "{head}: validity ENDED on {y:04}-{m:02}-{d:02} ({} days ago): renew it",
                -days
            )
        } else if self.needs_warning(now) {
            format!("{head}: valid until {y:04}-{m:02}-{d:02}, only {days} days left: renew it")
        } else {
            format!("{head}: valid until {y:04}-{m:02}-{d:02} ({days} days left)")
        }
    }
}

/// The validity of the certificates in `file` (every certificate of a chain counts: the one
/// that ends first ends the file's), named `key` for messages.
pub fn validity_of_file(key: &'static str, file: &Path) -> Result<Validity, TlsError> {
    let certs = load_certs(file)?;
    let mut not_after = i64::MAX;
    for c in &certs {
        let (_, parsed) = x509_parser::parse_x509_certificate(c).map_err(|e| TlsError::BadPem {
            file: file.to_path_buf(),
            detail: format!("certificate: {e}"),
        })?;
        not_after = not_after.min(parsed.validity().not_after.timestamp());
    }
    Ok(Validity {
        key,
        file: file.to_path_buf(),
        not_after,
    })
}

/// The validity of a daemon's `tls.cert` and `tls.ca` files, in that order.
pub fn validity_of(cert: &Path, ca: &Path) -> Result<[Validity; 2], TlsError> {
    Ok([
        validity_of_file("tls.cert", cert)?,
        validity_of_file("tls.ca", ca)?,
    ])
}

/// The validity of a certificate the peer presented (its first, the end entity's), in seconds
/// since 1970; `None` if it does not parse.
pub fn peer_not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// Seconds since 1970 now (0 if the clock is before it).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn read(file: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(file).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            TlsError::Missing {
                file: file.to_path_buf(),
            }
        } else {
            TlsError::Read {
                file: file.to_path_buf(),
                cause: source,
            }
        }
    })
}

fn pem_error(file: &Path, e: rustls::pki_types::pem::Error) -> TlsError {
    TlsError::BadPem {
        file: file.to_path_buf(),
        detail: e.to_string(),
    }
}

/// All certificates in a PEM file (at least one).
pub fn load_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(file)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(file, e))?;
    if certs.is_empty() {
        return Err(TlsError::NotPem {
            file: file.to_path_buf(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, SEC1 or PKCS#1) in a PEM file.
pub fn load_key(file: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(file)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            file: file.to_path_buf(),
        },
        e => pem_error(file, e),
    })
}

fn roots(ca: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in load_certs(ca)? {
        store.add(cert).map_err(|e| TlsError::BadCa {
            file: ca.to_path_buf(),
            detail: e.to_string(),
        })?;
    }
    Ok(Arc::new(store))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Maps the error of installing a certificate and key into one naming the right file.
fn cert_key_error(cert: &Path, key: &Path, e: rustls::Error) -> TlsError {
    match e {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        },
        rustls::Error::General(_) => TlsError::Rejected {
            file: key.to_path_buf(),
            source: e,
        },
        e => TlsError::Rejected {
            file: cert.to_path_buf(),
            source: e,
        },
    }
}

/// The proxy's TLS configuration: presents `cert`/`key`, requires a client certificate that
/// chains to `ca` and is valid for client authentication. TLS 1.3 only, ALPN [`ALPN`].
pub fn server_config(ca: &Path, cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    server_config_revoking(ca, cert, key, Arc::new(Revoked::default()))
}

/// [`server_config`] that also refuses every relay certificate whose name ([`relay_name`];
/// `unnamed` without one) `revoked` lists at the time of the handshake, with the TLS alert
/// `certificate_revoked` — so the relay learns why ([`is_revoked_alert`]) and the proxy's
/// list can change while it runs.
pub fn server_config_revoking(
    ca: &Path,
    cert: &Path,
    key: &Path,
    revoked: Arc<Revoked>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let inner = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider.clone())
        .build()
        .map_err(|e| TlsError::BadCa {
            file: ca.to_path_buf(),
            detail: e.to_string(),
        })?;
    let verifier = Arc::new(RevokingVerifier { inner, revoked });
    let chain = load_certs(cert)?;
    let private = load_key(key)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("the ring provider supports TLS 1.3")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, private)
        .map_err(|e| cert_key_error(cert, key, e))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    // No session resumption: a resumed session skips the client certificate's verification,
    // so a relay revoked (or whose certificate expired) since its last full handshake would
    // get in again. A full handshake costs the same round trips; only some CPU per subflow.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// The relay names a proxy refuses (`proxy.revoked_relays`), replaceable while it runs.
///
/// The proxy's TLS verifier consults it at every handshake ([`server_config_revoking`]) and
/// warns about each refused name at most once a minute (with how many refusals it did not
/// log since).
#[derive(Debug, Default)]
pub struct Revoked {
    names: RwLock<Vec<String>>,
    /// Per refused name: when it was last logged and refusals since then.
    warned: Mutex<HashMap<String, (Instant, u64)>>,
}

/// How often a refused relay name is logged at most.
const REVOKED_WARN_EVERY: Duration = Duration::from_secs(60);

impl Revoked {
    /// A list of names.
    pub fn new(names: Vec<String>) -> Revoked {
        Revoked {
            names: RwLock::new(names),
            warned: Mutex::default(),
        }
    }

    /// Whether `relay` is revoked.
    pub fn contains(&self, relay: &str) -> bool {
        self.names
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|r| r == relay)
    }

    /// The names, as configured.
    pub fn names(&self) -> Vec<String> {
        self.names.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the names.
    pub fn replace(&self, names: Vec<String>) {
        *self.names.write().unwrap_or_else(|p| p.into_inner()) = names;
    }

    fn refused(&self, relay: &str) {
        let now = Instant::now();
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let log = match warned.get_mut(relay) {
            Some((at, n)) if now.duration_since(*at) < REVOKED_WARN_EVERY => {
                *n += 1;
                None
            }
            Some((at, n)) => {
                let since = std::mem::take(n);
                *at = now;
                Some(since)
            }
            None => {
                if warned.len() >= 4096 {
                    warned.clear();
                }
                warned.insert(relay.to_string(), (now, 0));
                Some(0)
            }
        };
        drop(warned);
        if let Some(n) = log {
            tracing::warn!(
                relay,
                refused_since_last_warning = (n > 0).then_some(n),
                "subflow refused: relay certificate `{relay}` is revoked (proxy.revoked_relays)"
            );
        }
    }
}

/// The proxy's client-certificate verifier: the CA's verdict, then the revoked names.
#[derive(Debug)]
struct RevokingVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    revoked: Arc<Revoked>,
}

impl ClientCertVerifier for RevokingVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let name = relay_name(end_entity).unwrap_or_else(|| "unnamed".into());
        if self.revoked.contains(&name) {
            self.revoked.refused(&name);
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Revoked,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Whether `e` (an I/O error from a TLS stream) is the TLS alert `certificate_revoked` the
/// peer sent: on a relay, the proxy refusing its certificate as revoked.
pub fn is_revoked_alert(e: &io::Error) -> bool {
    rustls_error(e).is_some_and(|r| {
        *r == rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRevoked)
    })
}

/// Whether `e` (an I/O error from a TLS stream) is this end refusing the peer's certificate
/// as revoked: on the proxy, a relay name in [`Revoked`].
pub fn is_revoked_refusal(e: &io::Error) -> bool {
    rustls_error(e)
        .is_some_and(|r| *r == rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked))
}

/// The TLS error inside an I/O error of a TLS stream, if that is what it is.
fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// The relay's TLS configuration: trusts only `ca`, presents `cert`/`key`. TLS 1.3 only, ALPN
/// [`ALPN`]. Connect with [`proxy_server_name`] as the name to verify.
pub fn client_config(ca: &Path, cert: &Path, key: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = roots(ca)?;
    let chain = load_certs(cert)?;
    let private = load_key(key)?;
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("the ring provider supports TLS 1.3")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, private)
        .map_err(|e| cert_key_error(cert, key, e))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// The bytes of a daemon's three TLS files (`tls.ca`, `tls.cert`, `tls.key`), to tell whether
/// a reload finds anything new. Errors name the file.
pub fn file_contents(ca: &Path, cert: &Path, key: &Path) -> Result<[Vec<u8>; 3], TlsError> {
    Ok([read(ca)?, read(cert)?, read(key)?])
}

/// [`PROXY_SERVER_NAME`] as the `ServerName` a relay passes to `TlsConnector::connect`.
pub fn proxy_server_name() -> ServerName<'static> {
    ServerName::try_from(PROXY_SERVER_NAME).expect("constant is a valid DNS name")
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn civil_dates_of_days_since_1970() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(10_957), (2000, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_789), (2026, 12, 2));
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
    }
}
