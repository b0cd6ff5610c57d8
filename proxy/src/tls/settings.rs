//! rustls configurations from Redis's `tls-*` settings. Each core builds its
//! own server configuration (its own session cache: nothing shared between
//! cores); `check` builds them once at start so a bad certificate, key or
//! setting stops the start with Redis's message. CONFIG SET of a `tls-*`
//! setting builds a new one on every core (`install`), which connections
//! accepted from then on use, as Redis 7.0 reconfigures its SSL_CTX.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{ring as ring_provider, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{
    NoServerSessionStorage, ProducesTickets, ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier,
};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme,
    SupportedCipherSuite, SupportedProtocolVersion,
};
use shard::config::{TlsAuthClients, TlsSettings};
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// This core's server configuration since the last CONFIG SET of a
    /// `tls-*` setting (None: the one its listeners started with).
    static INSTALLED: RefCell<Option<Arc<ServerConfig>>> = const { RefCell::new(None) };
}

/// The configuration a connection accepted now on this core handshakes
/// with: CONFIG SET's, else the listener's own.
pub fn current(started_with: Arc<ServerConfig>) -> Arc<ServerConfig> {
    INSTALLED.with(|c| c.borrow().clone()).unwrap_or(started_with)
}

/// Installs `config` for this core's new TLS connections.
pub fn install(config: Arc<ServerConfig>) {
    INSTALLED.with(|c| *c.borrow_mut() = Some(config));
}

/// Everything a start with these settings would build; the error is the
/// line Redis logs before it exits.
pub fn check(s: &TlsSettings) -> Result<(), String> {
    if !s.used() {
        return Ok(());
    }
    server_config(s)?;
    if s.replication {
        client_config(s)?;
    }
    Ok(())
}

/// The configuration a core's TLS listeners accept with.
pub fn server_config(s: &TlsSettings) -> Result<Arc<ServerConfig>, String> {
    if s.cert_file.is_empty() {
        return Err("No tls-cert-file configured!".into());
    }
    if s.key_file.is_empty() {
        return Err("No tls-key-file configured!".into());
    }
    let provider = Arc::new(provider(s)?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&protocols(&s.protocols)?)
        .map_err(|e| format!("Failed to configure TLS: {e}"))?;
    let builder = match s.auth_clients {
        TlsAuthClients::No => builder.with_no_client_auth(),
        auth => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(s)?), provider);
            let verifier = if auth == TlsAuthClients::Optional { verifier.allow_unauthenticated() } else { verifier };
            let verifier =
                verifier.build().map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let certs = certificates(&s.cert_file)?;
    let key = private_key(&s.key_file, &s.key_file_pass)?;
    let mut config =
        builder.with_single_cert(certs, key).map_err(|e| format!("Failed to load private key: {}: {e}", s.key_file))?;
    config.ignore_client_order = s.prefer_server_ciphers;
    // As OpenSSL under Redis: stateless tickets always (tls-session-caching
    // no turns off only the cache), and the server-side cache when on.
    // Both per core. Tickets matter beyond resumption: they are the data a
    // TLSv1.3 server sends right after the handshake, which a client with
    // Nagle on waits for before its first command (a 40 ms delayed ACK).
    // `tls-session-cache-timeout` (OpenSSL's SSL_CTX_set_timeout) bounds
    // both: rustls checks neither a ticket's age nor a cached session's.
    let timeout = s.session_cache_timeout;
    let ticketer = ring_provider::Ticketer::new().map_err(|e| format!("Failed to configure TLS: {e}"))?;
    config.ticketer = Arc::new(TimedTickets { inner: ticketer, timeout });
    config.session_storage = match s.session_caching && s.session_cache_size > 0 {
        true => Arc::new(TimedCache { inner: ServerSessionMemoryCache::new(s.session_cache_size as usize), timeout }),
        false => Arc::new(NoServerSessionStorage {}),
    };
    Ok(Arc::new(config))
}

/// The configuration of the replica's link to its primary: the primary's
/// certificate checked against the CA, this side's own certificate
/// (`tls-client-cert-file`, else `tls-cert-file`) presented.
pub fn client_config(s: &TlsSettings) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(provider(s)?);
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(s)?), provider.clone())
        .build()
        .map_err(|e| format!("Failed to configure CA certificate(s) file/directory: {e}"))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&protocols(&s.protocols)?)
        .map_err(|e| format!("Failed to configure TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyName(verifier)));
    let (cert, key, pass) = match s.client_cert_file.is_empty() {
        true => (&s.cert_file, &s.key_file, &s.key_file_pass),
        false => (&s.client_cert_file, &s.client_key_file, &s.client_key_file_pass),
    };
    if cert.is_empty() {
        return Ok(Arc::new(builder.with_no_client_auth()));
    }
    let config = builder
        .with_client_auth_cert(certificates(cert)?, private_key(key, pass)?)
        .map_err(|e| format!("Failed to load private key: {key}: {e}"))?;
    Ok(Arc::new(config))
}

/// The name the primary's certificate is checked against (Redis checks the
/// chain but not the name; see `AnyName`).
pub fn server_name(host: &str) -> ServerName<'static> {
    ServerName::try_from(host.to_string()).unwrap_or_else(|_| ServerName::try_from("localhost").unwrap())
}

fn certificates(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let failed = |e: String| format!("Failed to load certificate: {path}: {e}");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| failed(pem_reason(e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| failed(pem_reason(e)))?;
    if certs.is_empty() {
        return Err(failed("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

fn private_key(path: &str, pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    let failed = |reason: String| format!("Failed to load private key: {path}: {reason}");
    let text = std::fs::read_to_string(path).map_err(|e| failed(shard::config::os_reason(&e)))?;
    if let Some(key) = encrypted_key(&text, pass).map_err(failed)? {
        return Ok(key);
    }
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(failed(
            "legacy PEM encryption is not supported: convert the key to encrypted PKCS#8 (`openssl pkcs8 -topk8`)"
                .into(),
        ));
    }
    PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(|e| failed(pem_reason(e)))
}

/// The file's `ENCRYPTED PRIVATE KEY` (PKCS#8, PBES2 as OpenSSL writes it)
/// decrypted with `tls-key-file-pass` (OpenSSL's passphrase callback under
/// Redis); `None` when the file holds no encrypted key.
fn encrypted_key(text: &str, pass: &str) -> Result<Option<PrivateKeyDer<'static>>, String> {
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let Some(start) = text.find(BEGIN) else { return Ok(None) };
    let end = text[start..].find(END).map(|e| start + e + END.len()).ok_or("unterminated PEM block")?;
    let (_, der) = pkcs8::der::Document::from_pem(&text[start..end]).map_err(|e| e.to_string())?;
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_bytes()).map_err(|e| e.to_string())?;
    if pass.is_empty() {
        return Err("the key is encrypted and no passphrase is set (tls-key-file-pass)".into());
    }
    // A wrong passphrase fails the padding check (OpenSSL: "bad decrypt").
    let key = info.decrypt(pass).map_err(|_| "bad decrypt (wrong passphrase?)".to_string())?;
    Ok(Some(PrivateKeyDer::Pkcs8(key.as_bytes().to_vec().into())))
}

/// Seconds since the epoch, as tickets and cached sessions are stamped.
fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `data` stamped with the time it was issued.
fn stamped(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + data.len());
    out.extend_from_slice(&now_secs().to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// What `stamped` held, while younger than `timeout` seconds.
fn fresh(stamped: Vec<u8>, timeout: u64) -> Option<Vec<u8>> {
    let at = u64::from_be_bytes(stamped.get(..8)?.try_into().ok()?);
    (now_secs().saturating_sub(at) < timeout).then(|| stamped[8..].to_vec())
}

/// Session tickets that expire after `tls-session-cache-timeout`: the issue
/// time is sealed inside the ticket and checked when it comes back.
#[derive(Debug)]
struct TimedTickets {
    inner: Arc<dyn ProducesTickets>,
    timeout: u64,
}

impl ProducesTickets for TimedTickets {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }

    /// The hint clients get (TLS 1.3 caps it at 7 days).
    fn lifetime(&self) -> u32 {
        self.timeout.min(604_800) as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.inner.encrypt(&stamped(plain))
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        fresh(self.inner.decrypt(cipher)?, self.timeout)
    }
}

/// The server-side session cache (`tls-session-cache-size` entries), whose
/// entries expire after `tls-session-cache-timeout`.
#[derive(Debug)]
struct TimedCache {
    inner: Arc<dyn StoresServerSessions>,
    timeout: u64,
}

impl StoresServerSessions for TimedCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, stamped(&value))
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        fresh(self.inner.get(key)?, self.timeout)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        fresh(self.inner.take(key)?, self.timeout)
    }

    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

fn pem_reason(e: rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(e) => shard::config::os_reason(&e),
        Error::NoItemsFound => "no PEM item of that kind in the file".into(),
        e => e.to_string(),
    }
}

/// The CA certificates of `tls-ca-cert-file` and every file of
/// `tls-ca-cert-dir`; Redis requires one when clients, replicas or cluster
/// peers are verified.
fn roots(s: &TlsSettings) -> Result<RootCertStore, String> {
    if s.ca_cert_file.is_empty() && s.ca_cert_dir.is_empty() {
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, \
                    tls-replication or tls-auth-clients are enabled!"
            .into());
    }
    let failed = |e: String| format!("Failed to configure CA certificate(s) file/directory: {e}");
    let mut store = RootCertStore::empty();
    if !s.ca_cert_file.is_empty() {
        for cert in certificates(&s.ca_cert_file).map_err(failed)? {
            store.add(cert).map_err(|e| failed(format!("{}: {e}", s.ca_cert_file)))?;
        }
    }
    if !s.ca_cert_dir.is_empty() {
        let dir = std::fs::read_dir(&s.ca_cert_dir)
            .map_err(|e| failed(format!("{}: {}", s.ca_cert_dir, shard::config::os_reason(&e))))?;
        // OpenSSL's hashed names, or any PEM file: whatever parses counts.
        for entry in dir.flatten() {
            let Ok(iter) = CertificateDer::pem_file_iter(entry.path()) else { continue };
            for cert in iter.flatten() {
                let _ = store.add(cert);
            }
        }
    }
    if store.is_empty() {
        return Err(failed("no CA certificate found".into()));
    }
    Ok(store)
}

/// `tls-protocols`: Redis's words; rustls speaks TLSv1.2 and TLSv1.3 only.
fn protocols(text: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    if text.trim().is_empty() {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    }
    let mut versions = Vec::new();
    for word in text.split_whitespace() {
        match word.to_ascii_lowercase().as_str() {
            "tlsv1.3" => versions.push(&rustls::version::TLS13),
            "tlsv1.2" => versions.push(&rustls::version::TLS12),
            "tlsv1" | "tlsv1.1" => {
                crate::log::warning(&format!("{word} is specified in tls-protocols but not supported by rustls."))
            }
            _ => {
                return Err("Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and \
                            'TLSv1.3'."
                    .into())
            }
        }
    }
    if versions.is_empty() {
        return Err("tls-protocols: none of the protocols given is supported (TLSv1.2, TLSv1.3)".into());
    }
    Ok(versions)
}

/// OpenSSL's names of the TLSv1.2 suites rustls implements.
const TLS12_NAMES: &[(&str, &str)] = &[
    ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
    ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
    ("ECDHE-ECDSA-CHACHA20-POLY1305", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ("ECDHE-RSA-AES256-GCM-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    ("ECDHE-RSA-CHACHA20-POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
];

/// The ring provider with the cipher suites `tls-ciphers` (TLSv1.2) and
/// `tls-ciphersuites` (TLSv1.3) select.
fn provider(s: &TlsSettings) -> Result<CryptoProvider, String> {
    let mut provider = ring_provider::default_provider();
    let all = provider.cipher_suites.clone();
    let tls12: Vec<SupportedCipherSuite> =
        all.iter().copied().filter(|c| matches!(c, SupportedCipherSuite::Tls12(_))).collect();
    let tls13: Vec<SupportedCipherSuite> =
        all.iter().copied().filter(|c| matches!(c, SupportedCipherSuite::Tls13(_))).collect();
    let pick12 = select(&s.ciphers, &tls12, |suite, name| {
        let iana = format!("{:?}", suite.suite());
        iana.eq_ignore_ascii_case(name) || TLS12_NAMES.iter().any(|(o, i)| o.eq_ignore_ascii_case(name) && *i == iana)
    })
    .ok_or_else(|| format!("Failed to configure ciphers: {}", s.ciphers))?;
    // OpenSSL's TLSv1.3 names are IANA's: TLS_AES_128_GCM_SHA256.
    let pick13 = select(&s.ciphersuites, &tls13, |suite, name| {
        format!("{:?}", suite.suite()).replace("TLS13_", "TLS_").eq_ignore_ascii_case(name)
    })
    .ok_or_else(|| format!("Failed to configure ciphersuites: {}", s.ciphersuites))?;
    provider.cipher_suites = pick13.into_iter().chain(pick12).collect();
    Ok(provider)
}

/// An OpenSSL-style list (`A:B`, `!A` removes, `DEFAULT`/`ALL`/`HIGH` mean
/// all); names rustls lacks are skipped as OpenSSL skips unknown ones.
/// `None` when the list selects nothing.
fn select(
    list: &str,
    suites: &[SupportedCipherSuite],
    is: impl Fn(&SupportedCipherSuite, &str) -> bool,
) -> Option<Vec<SupportedCipherSuite>> {
    if list.trim().is_empty() {
        return Some(suites.to_vec());
    }
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    for word in list.split([':', ',', ' ']).filter(|w| !w.is_empty()) {
        let (remove, name) = match word.as_bytes()[0] {
            b'!' | b'-' => (true, &word[1..]),
            b'+' => (false, &word[1..]),
            _ => (false, word),
        };
        let every = ["DEFAULT", "ALL", "HIGH"].iter().any(|k| k.eq_ignore_ascii_case(name));
        for suite in suites.iter().filter(|s| every || is(s, name)) {
            let present = chosen.iter().any(|c| c.suite() == suite.suite());
            if remove {
                chosen.retain(|c| c.suite() != suite.suite());
            } else if !present {
                chosen.push(*suite);
            }
        }
    }
    (!chosen.is_empty()).then_some(chosen)
}

/// Checks the primary's chain as Redis does (OpenSSL's SSL_VERIFY_PEER),
/// without matching its name: a replica names its primary by address.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(suites: &[SupportedCipherSuite]) -> Vec<String> {
        suites.iter().map(|s| format!("{:?}", s.suite())).collect()
    }

    fn settings(ciphers: &str, ciphersuites: &str) -> TlsSettings {
        TlsSettings { ciphers: ciphers.into(), ciphersuites: ciphersuites.into(), ..Default::default() }
    }

    #[test]
    fn cipher_lists_in_openssl_names() {
        let all = ring_provider::default_provider().cipher_suites.len();
        assert_eq!(provider(&settings("", "")).unwrap().cipher_suites.len(), all);
        let p = provider(&settings("ECDHE-RSA-AES256-GCM-SHA384:NO-SUCH-CIPHER", "TLS_AES_128_GCM_SHA256")).unwrap();
        assert_eq!(names(&p.cipher_suites), ["TLS13_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]);
        let p = provider(&settings("DEFAULT:!ECDHE-RSA-CHACHA20-POLY1305", "")).unwrap();
        assert!(!names(&p.cipher_suites).contains(&"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256".to_string()));
        assert_eq!(p.cipher_suites.len(), all - 1);
        assert_eq!(provider(&settings("RC4-MD5", "")).err().unwrap(), "Failed to configure ciphers: RC4-MD5");
        assert_eq!(provider(&settings("", "TLS_NOPE")).err().unwrap(), "Failed to configure ciphersuites: TLS_NOPE");
    }

    #[test]
    fn protocols_as_redis_words_them() {
        assert_eq!(protocols("").unwrap().len(), 2);
        assert_eq!(protocols("TLSv1.3").unwrap().len(), 1);
        assert_eq!(protocols("tlsv1.2 TLSv1.3").unwrap().len(), 2);
        assert!(protocols("TLSv1.1 TLSv1.2").unwrap().len() == 1);
        assert!(protocols("TLSv1").is_err());
        assert!(protocols("SSLv3").unwrap_err().starts_with("Invalid tls-protocols specified."));
    }

    #[test]
    fn missing_files_are_named() {
        let s = TlsSettings { port: 6380, ..Default::default() };
        assert_eq!(server_config(&s).err().unwrap(), "No tls-cert-file configured!");
        let s = TlsSettings { port: 6380, cert_file: "/nonexistent.crt".into(), key_file: "k".into(), ..s };
        assert!(server_config(&s).err().unwrap().starts_with("Either tls-ca-cert-file or tls-ca-cert-dir"));
        let s = TlsSettings { auth_clients: TlsAuthClients::No, ..s };
        assert_eq!(
            server_config(&s).err().unwrap(),
            "Failed to load certificate: /nonexistent.crt: No such file or directory"
        );
    }
}
