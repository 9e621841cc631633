//! [`NatsAuth`]: how a connection proves who it is, checks whom it talks to, and names its
//! reply subjects where its permissions say so, for a bus that spans machines: a NATS `.creds` file (a user JWT and its seed: decentralized auth,
//! operator mode, NGS/Synadia Cloud), a user nkey seed, or the URL's user and password or
//! token (`lib.rs`); TLS with the deployment's own CA, a client certificate where the server
//! verifies clients (mutual TLS), and `handshake_first` servers; a custom inbox prefix for a
//! user allowed to subscribe only under its own.
//!
//! Every file is checked when the options are built, so a missing or unreadable one stops
//! the process at start with its path named, instead of a connection that retries for ever.
//! The credentials file is read again at each connection attempt, and so are the certificate
//! files (by async-nats): a user JWT or a certificate rotated on disk is used from the next
//! reconnect. A seed is never printed.

use crate::NatsError;
use std::path::{Path, PathBuf};

/// How a NATS connection authenticates and what TLS it uses. Empty (the default): a plain
/// connection, authenticated only by what the URL carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsAuth {
    /// A NATS credentials file (`.creds`: a user JWT and the user's nkey seed, as `nsc`
    /// writes it).
    pub credentials_file: Option<PathBuf>,
    /// A file holding a user nkey seed (`SU...`), for servers that list users by nkey.
    pub nkey_seed_file: Option<PathBuf>,
    /// PEM root certificates the server's certificate must chain to (else the system's
    /// webpki roots). Implies TLS.
    pub tls_ca_file: Option<PathBuf>,
    /// A PEM client certificate, for servers that verify clients; with `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// The client certificate's PEM private key.
    pub tls_key_file: Option<PathBuf>,
    /// Refuse a connection that is not TLS (a `tls://` URL requires it too).
    pub tls_required: bool,
    /// TLS before the server's INFO (the server's `handshake_first`). Implies TLS.
    pub tls_first: bool,
    /// The prefix of this connection's reply subjects (default `_INBOX`), where the user's
    /// permissions allow subscribing only under a prefix of its own: every reply subject the
    /// bridge and async-nats make (calls, JetStream, KV watches) is `{prefix}.<nuid>...`.
    pub inbox_prefix: Option<String>,
}

impl NatsAuth {
    /// Whether anything is set.
    pub fn is_empty(&self) -> bool {
        *self == NatsAuth::default()
    }

    /// Every path made absolute against `base` (a config file's directory) where it is
    /// relative.
    pub fn relative_to(mut self, base: &Path) -> NatsAuth {
        for path in [
            &mut self.credentials_file,
            &mut self.nkey_seed_file,
            &mut self.tls_ca_file,
            &mut self.tls_cert_file,
            &mut self.tls_key_file,
        ]
        .into_iter()
        .flatten()
        {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
        self
    }

    /// Connect options carrying these settings (start from them in [`crate::connect_with`]).
    /// Reads the files (blocking: a start-up step).
    ///
    /// # Errors
    ///
    /// [`NatsError::Config`] naming the setting and its file: a file that cannot be read, a
    /// credentials file or seed that does not parse, a certificate without its key (or the
    /// other way round), a credentials file and a seed both given.
    pub fn options(&self) -> Result<async_nats::ConnectOptions, NatsError> {
        let mut options = async_nats::ConnectOptions::new();
        match (&self.credentials_file, &self.nkey_seed_file) {
            (Some(_), Some(_)) => return Err(config(
                "a credentials file and an nkey seed file are two ways to say who we are: give one",
            )),
            (Some(creds), None) => {
                let text = read("credentials file", creds)?;
                creds_of(&text).map_err(|e| {
                    config(format!(
                        "the credentials file {} does not hold a user JWT and seed: {e}",
                        creds.display()
                    ))
                })?;
                options = signing_in_with(creds.clone());
            }
            (None, Some(seed_file)) => {
                let seed = read("nkey seed file", seed_file)?;
                let seed = seed.trim();
                // The seed is checked here (async-nats would only fail at each connection
                // attempt) and never quoted: it is the secret.
                if let Err(e) = nkeys::KeyPair::from_seed(seed) {
                    return Err(config(format!(
                        "the nkey seed file {} does not hold an nkey seed: {e}",
                        seed_file.display()
                    )));
                }
                options = options.nkey(seed.to_owned());
            }
            (None, None) => {}
        }
        if let Some(ca) = &self.tls_ca_file {
            read("TLS CA file", ca)?;
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => {
                read("TLS certificate file", cert)?;
                read("TLS key file", key)?;
                options = options
                    .add_client_certificate(cert.clone(), key.clone())
                    .require_tls(true);
            }
            (None, None) => {}
            _ => {
                return Err(config(
                    "a TLS client certificate needs its key, and a key its certificate: give both",
                ))
            }
        }
        if self.tls_required {
            options = options.require_tls(true);
        }
        if self.tls_first {
            options = options.tls_first();
        }
        if let Some(prefix) = &self.inbox_prefix {
            if !crate::wire::usable_reply_subject(prefix, "") || prefix.ends_with('.') {
                return Err(config(format!(
                    "the inbox prefix `{}` is not a subject prefix (tokens of letters, digits, `_` or `-`, separated by dots)",
                    prefix.escape_debug()
                )));
            }
            options = options.custom_inbox_prefix(prefix);
        }
        Ok(options)
    }
}

/// Options that sign in with the credentials file at `path`, read again at each connection
/// attempt: a user JWT rotated on disk (a Kubernetes Secret updated in place, `nsc` writing
/// a new one) is used from the next reconnect, as a server that ends a connection whose JWT
/// expired expects. An attempt with a file that no longer reads fails, and the next one reads
/// it again.
fn signing_in_with(path: PathBuf) -> async_nats::ConnectOptions {
    async_nats::ConnectOptions::with_auth_callback(move |nonce| {
        let path = path.clone();
        async move {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                async_nats::AuthError::new(format!("the credentials file {}: {e}", path.display()))
            })?;
            let (jwt, key) = creds_of(&text).map_err(|e| {
                async_nats::AuthError::new(format!("the credentials file {}: {e}", path.display()))
            })?;
            let signature = key.sign(&nonce).map_err(async_nats::AuthError::new)?;
            let mut auth = async_nats::Auth::new();
            auth.jwt = Some(jwt);
            auth.signature = Some(signature);
            Ok(auth)
        }
    })
}

/// The user JWT and the key pair of its seed in a `.creds` file's text: the first line inside
/// its `-----BEGIN ... JWT-----` block and the first inside its `-----BEGIN ... SEED-----`
/// block, as `nsc` writes them. The error never quotes the seed.
fn creds_of(text: &str) -> Result<(String, nkeys::KeyPair), String> {
    let block = |what: &str| {
        let mut lines = text.lines().map(str::trim);
        lines.find(|l| l.starts_with("-----BEGIN") && l.contains(what))?;
        lines
            .find(|l| !l.is_empty())
            .filter(|l| !l.starts_with("---"))
    };
    let jwt = block("JWT").ok_or("no user JWT in it")?;
    let seed = block("SEED").ok_or("no nkey seed in it")?;
    let key =
        nkeys::KeyPair::from_seed(seed).map_err(|e| format!("its seed does not parse: {e}"))?;
    Ok((jwt.to_owned(), key))
}

fn config(message: impl Into<String>) -> NatsError {
    NatsError::Config(message.into())
}

/// The text of `path`, the `what` of the settings; an error naming both.
fn read(what: &str, path: &Path) -> Result<String, NatsError> {
    std::fs::read_to_string(path).map_err(|e| config(format!("the {what} {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ty-nats-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("a temp file");
        path
    }

    fn refusal(auth: &NatsAuth) -> String {
        match auth.options() {
            Ok(_) => panic!("{auth:?} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_missing_file_is_refused_at_start_with_its_path_named() {
        let e = refusal(&NatsAuth {
            tls_ca_file: Some("/nonexistent/ca.pem".into()),
            ..NatsAuth::default()
        });
        assert!(e.contains("TLS CA file /nonexistent/ca.pem"), "{e}");
        let e = refusal(&NatsAuth {
            credentials_file: Some("/nonexistent/user.creds".into()),
            ..NatsAuth::default()
        });
        assert!(
            e.contains("credentials file /nonexistent/user.creds"),
            "{e}"
        );
    }

    #[test]
    fn a_seed_that_does_not_parse_is_refused_without_being_quoted() {
        let path = scratch("bad.nk", "SUNOTASEED-hunter2\n");
        let e = refusal(&NatsAuth {
            nkey_seed_file: Some(path.clone()),
            ..NatsAuth::default()
        });
        assert!(e.contains("does not hold an nkey seed"), "{e}");
        assert!(!e.contains("hunter2"), "the seed is never printed: {e}");
        let e = refusal(&NatsAuth {
            credentials_file: Some(path),
            ..NatsAuth::default()
        });
        assert!(e.contains("does not hold a user JWT and seed"), "{e}");
        assert!(!e.contains("hunter2"), "the seed is never printed: {e}");
    }

    #[test]
    fn a_creds_files_jwt_and_seed_are_read_from_their_blocks() {
        let user = nkeys::KeyPair::new_user();
        let seed = user.seed().expect("a seed");
        let text = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0.eyJ1.c2ln\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        let (jwt, key) = creds_of(&text).expect("a creds file");
        assert_eq!(jwt, "eyJ0.eyJ1.c2ln");
        assert_eq!(key.public_key(), user.public_key());
        for broken in [
            "",
            "-----BEGIN NATS USER JWT-----\n------END NATS USER JWT------\n",
        ] {
            assert!(creds_of(broken).is_err(), "{broken:?}");
        }
    }

    #[test]
    fn half_a_client_certificate_or_two_identities_are_refused() {
        let cert = scratch("cert.pem", "-");
        let e = refusal(&NatsAuth {
            tls_cert_file: Some(cert),
            ..NatsAuth::default()
        });
        assert!(e.contains("needs its key"), "{e}");
        let seed = nkeys::KeyPair::new_user().seed().expect("a seed");
        let e = refusal(&NatsAuth {
            credentials_file: Some(scratch("a.creds", "")),
            nkey_seed_file: Some(scratch("a.nk", &seed)),
            ..NatsAuth::default()
        });
        assert!(e.contains("give one"), "{e}");
    }

    #[test]
    fn an_inbox_prefix_must_be_a_subject_prefix() {
        for bad in ["", "_INBOX.*", "a b", "a..b", ">", "$SYS"] {
            let e = refusal(&NatsAuth {
                inbox_prefix: Some(bad.into()),
                ..NatsAuth::default()
            });
            assert!(e.contains("is not a subject prefix"), "{bad:?}: {e}");
        }
        let ok = NatsAuth {
            inbox_prefix: Some("_INBOX_tenant.gw".into()),
            ..NatsAuth::default()
        };
        assert!(ok.options().is_ok());
    }

    #[test]
    fn relative_paths_are_read_from_the_config_files_directory() {
        let auth = NatsAuth {
            credentials_file: Some("user.creds".into()),
            tls_ca_file: Some("/etc/ca.pem".into()),
            ..NatsAuth::default()
        }
        .relative_to(Path::new("/srv/toolyard"));
        assert_eq!(
            auth.credentials_file.as_deref(),
            Some(Path::new("/srv/toolyard/user.creds"))
        );
        assert_eq!(auth.tls_ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    }
}
