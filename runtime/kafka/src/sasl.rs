//! SASL authentication on the Kafka listener (Kafka's `SASL_PLAINTEXT`, and `SASL_SSL` over
//! TLS): the `PLAIN` mechanism as Kafka's `PlainServerCallbackHandler` with users from the
//! broker's JAAS configuration, and `SCRAM-SHA-256`/`SCRAM-SHA-512` (RFC 5802, RFC 7677) as
//! Kafka's `ScramSaslServer`, the SCRAM credentials derived from the same users' passwords when
//! the worker starts.
//!
//! The exchange (KIP-152): `ApiVersions` (allowed before authentication), `SaslHandshake` v1
//! naming a mechanism, then `SaslAuthenticate` requests carrying the mechanism's messages: one
//! for PLAIN (`[authzid] NUL user NUL password`), two for SCRAM (client-first, client-final;
//! the answers carry server-first and server-final).
//!
//! Invariants:
//! * With users configured, a connection gets no other request served until it has
//!   authenticated (the connection loop in `server.rs` enforces it with [`Exchange`]).
//! * A failed authentication gets a message that does not say whether the user exists, and
//!   the connection is closed. SCRAM answers an unknown user's client-first like a known
//!   one's (a salt derived from the name with a key made at start, so it is the same on every
//!   try) and fails only at client-final, so the exchange does not tell names apart either.
//! * Passwords and proofs are compared in time independent of where they differ; passwords
//!   never appear in `Debug` output or log lines; the SCRAM salt of each user is random per
//!   start, and only the derived stored and server keys are kept besides the password PLAIN
//!   needs.
//! * An authorization id other than the user (impersonation), SCRAM channel binding, and
//!   SCRAM extensions (Kafka's delegation tokens) are refused.
//! * Authenticated users may do everything the listener allows (no ACLs).

use std::fmt;
use std::num::NonZeroU32;

use aws_lc_rs::{digest, hmac, pbkdf2};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

/// PBKDF2 iterations of the derived SCRAM credentials (Kafka's minimum, and its tools'
/// default).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// A SASL mechanism the listener can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    /// Every mechanism, in the order offered by default.
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
    ];

    /// The mechanism's SASL name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name` (SASL names are case-sensitive; clients send upper case).
    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    fn scram(
        self,
    ) -> Option<(
        &'static digest::Algorithm,
        hmac::Algorithm,
        pbkdf2::Algorithm,
    )> {
        match self {
            Mechanism::Plain => None,
            Mechanism::ScramSha256 => Some((
                &digest::SHA256,
                hmac::HMAC_SHA256,
                pbkdf2::PBKDF2_HMAC_SHA256,
            )),
            Mechanism::ScramSha512 => Some((
                &digest::SHA512,
                hmac::HMAC_SHA512,
                pbkdf2::PBKDF2_HMAC_SHA512,
            )),
        }
    }
}

/// A user's SCRAM credential for one hash (RFC 5802 section 3: what a server stores).
#[derive(Clone, PartialEq, Eq)]
struct ScramCredential {
    salt: Vec<u8>,
    iterations: u32,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl ScramCredential {
    fn derive(mechanism: Mechanism, password: &str, salt: Vec<u8>, iterations: u32) -> Self {
        let (hash, mac, kdf) = mechanism.scram().expect("a SCRAM mechanism");
        let mut salted = vec![0u8; hash.output_len()];
        let rounds = NonZeroU32::new(iterations).expect("iterations are positive");
        pbkdf2::derive(kdf, rounds, &salt, password.as_bytes(), &mut salted);
        let key = hmac::Key::new(mac, &salted);
        let client_key = hmac::sign(&key, b"Client Key");
        let server_key = hmac::sign(&key, b"Server Key");
        ScramCredential {
            salt,
            iterations,
            stored_key: digest::digest(hash, client_key.as_ref()).as_ref().to_vec(),
            server_key: server_key.as_ref().to_vec(),
        }
    }
}

#[derive(Clone, PartialEq, Eq)]
struct User {
    name: String,
    password: String,
    scram_sha256: Option<ScramCredential>,
    scram_sha512: Option<ScramCredential>,
}

/// The users and mechanisms of a listener.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SaslUsers {
    users: Vec<User>,
    mechanisms: Vec<Mechanism>,
    /// The key of the decoy salts given to unknown SCRAM users (random per start).
    decoy_key: Vec<u8>,
}

impl fmt::Debug for SaslUsers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.users.iter().map(|u| u.name.as_str()).collect();
        let mechanisms: Vec<&str> = self.mechanisms.iter().map(|m| m.name()).collect();
        f.debug_struct("SaslUsers")
            .field("users", &names)
            .field("mechanisms", &mechanisms)
            .finish()
    }
}

/// Why an authentication failed (logged; the client only hears that it failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslFailure {
    /// A message that is not what the mechanism sends at this step.
    Malformed(&'static str),
    /// An authorization id other than the user.
    Impersonation,
    /// Channel binding, or a SCRAM extension such as Kafka's delegation tokens.
    Unsupported(&'static str),
    /// No such user, or the wrong password or proof.
    BadCredentials { user: String },
}

impl fmt::Display for SaslFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SaslFailure::Malformed(what) => write!(f, "a malformed message: {what}"),
            SaslFailure::Impersonation => {
                f.write_str("the client asked for an authorization id different from its user name")
            }
            SaslFailure::Unsupported(what) => write!(f, "{what} is not supported"),
            SaslFailure::BadCredentials { user } => {
                write!(f, "unknown user or wrong password for user {user:?}")
            }
        }
    }
}

/// What one step of an exchange gives.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes; the client answers with the next message.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send `last` (SCRAM's server-final message, empty for PLAIN).
    Done {
        user: String,
        last: Vec<u8>,
    },
    Failed(SaslFailure),
}

/// One connection's exchange, from the handshake's mechanism on.
#[derive(Debug)]
pub struct Exchange {
    mechanism: Mechanism,
    /// SCRAM after client-first: the user, `client-first-bare,server-first`, the full nonce
    /// and the gs2 header to expect in client-final.
    scram: Option<ScramPending>,
}

#[derive(Debug)]
struct ScramPending {
    /// `None`: an unknown user, given a decoy server-first; client-final fails.
    user: Option<usize>,
    /// The user name the client gave.
    name: String,
    messages: String,
    nonce: String,
    gs2_header: String,
}

impl SaslUsers {
    /// The users (`(name, password)`), offering `mechanisms` (SCRAM credentials are derived
    /// for the SCRAM ones, with a fresh random salt each).
    pub fn new(users: Vec<(String, String)>, mechanisms: Vec<Mechanism>) -> SaslUsers {
        let salt = || {
            let mut bytes = vec![0u8; 24];
            aws_lc_rs::rand::fill(&mut bytes).expect("the system's random numbers");
            bytes
        };
        let credential = |m: Mechanism, password: &str, salt: Vec<u8>| {
            mechanisms
                .contains(&m)
                .then(|| ScramCredential::derive(m, password, salt, SCRAM_ITERATIONS))
        };
        let users: Vec<User> = users
            .into_iter()
            .map(|(name, password)| User {
                scram_sha256: credential(Mechanism::ScramSha256, &password, salt()),
                scram_sha512: credential(Mechanism::ScramSha512, &password, salt()),
                name,
                password,
            })
            .collect();
        // Without users the server offers no SASL (it drops an empty `SaslUsers`), so no key is
        // drawn: the first draw from the system's generator seeds aws-lc's jitter entropy
        // source, ~0.1 s of CPU at every worker start that is wasted without SASL.
        let mut decoy_key = Vec::new();
        if !users.is_empty() {
            decoy_key.resize(32, 0);
            aws_lc_rs::rand::fill(&mut decoy_key).expect("the system's random numbers");
        }
        SaslUsers {
            users,
            mechanisms,
            decoy_key,
        }
    }

    /// Whether any user is configured (no users: no SASL).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The mechanisms offered, in order.
    pub fn mechanisms(&self) -> &[Mechanism] {
        &self.mechanisms
    }

    /// Starts an exchange with `mechanism`, or `None` when it is not offered.
    pub fn start(&self, mechanism: Mechanism) -> Option<Exchange> {
        self.mechanisms.contains(&mechanism).then_some(Exchange {
            mechanism,
            scram: None,
        })
    }

    fn user(&self, name: &str) -> Option<usize> {
        self.users.iter().position(|u| u.name == name)
    }

    fn credential(&self, user: usize, mechanism: Mechanism) -> Option<&ScramCredential> {
        let u = &self.users[user];
        match mechanism {
            Mechanism::ScramSha256 => u.scram_sha256.as_ref(),
            Mechanism::ScramSha512 => u.scram_sha512.as_ref(),
            Mechanism::Plain => None,
        }
    }
}

impl Exchange {
    /// The mechanism chosen in the handshake.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Takes the client's next message.
    pub fn step(&mut self, users: &SaslUsers, message: &[u8]) -> Step {
        let mut nonce = [0u8; 18];
        aws_lc_rs::rand::fill(&mut nonce).expect("the system's random numbers");
        self.step_with_nonce(users, message, &BASE64.encode(nonce))
    }

    fn step_with_nonce(&mut self, users: &SaslUsers, message: &[u8], server_nonce: &str) -> Step {
        let result = match (self.mechanism, self.scram.take()) {
            (Mechanism::Plain, _) => plain(users, message).map(|user| Step::Done {
                user,
                last: Vec::new(),
            }),
            (_, None) => self.client_first(users, message, server_nonce),
            (_, Some(pending)) => self.client_final(users, message, pending),
        };
        result.unwrap_or_else(Step::Failed)
    }

    fn client_first(
        &mut self,
        users: &SaslUsers,
        message: &[u8],
        server_nonce: &str,
    ) -> Result<Step, SaslFailure> {
        let text = std::str::from_utf8(message).map_err(|_| SaslFailure::Malformed("not UTF-8"))?;
        // gs2-header: a channel-binding flag, an optional authzid, then the bare message.
        let (flag, rest) = text
            .split_once(',')
            .ok_or(SaslFailure::Malformed("no gs2 header"))?;
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return Err(SaslFailure::Unsupported("channel binding")),
            _ => return Err(SaslFailure::Malformed("an unknown channel-binding flag")),
        }
        let (authzid, bare) = rest
            .split_once(',')
            .ok_or(SaslFailure::Malformed("no gs2 header"))?;
        let mut fields = bare.split(',');
        let user = fields
            .next()
            .and_then(|f| f.strip_prefix("n="))
            .ok_or(SaslFailure::Malformed("no user name"))
            .and_then(saslname)?;
        let client_nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .filter(|n| !n.is_empty())
            .ok_or(SaslFailure::Malformed("no nonce"))?;
        if fields.next().is_some() {
            return Err(SaslFailure::Unsupported(
                "a SCRAM extension (such as Kafka's delegation tokens)",
            ));
        }
        if let Some(authzid) = authzid.strip_prefix("a=") {
            if saslname(authzid)? != user {
                return Err(SaslFailure::Impersonation);
            }
        } else if !authzid.is_empty() {
            return Err(SaslFailure::Malformed("a bad authorization id"));
        }
        let index = users.user(&user);
        let (salt, iterations) = match index.and_then(|i| users.credential(i, self.mechanism)) {
            Some(credential) => (credential.salt.clone(), credential.iterations),
            None => {
                // A salt that is the same for this name on every try, as a real one is.
                let key = hmac::Key::new(hmac::HMAC_SHA256, &users.decoy_key);
                let tag = hmac::sign(
                    &key,
                    format!("{}\0{user}", self.mechanism.name()).as_bytes(),
                );
                (tag.as_ref()[..24].to_vec(), SCRAM_ITERATIONS)
            }
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!("r={nonce},s={},i={iterations}", BASE64.encode(&salt));
        self.scram = Some(ScramPending {
            user: index.filter(|i| users.credential(*i, self.mechanism).is_some()),
            name: user.clone(),
            messages: format!("{bare},{server_first}"),
            nonce,
            gs2_header: format!("{flag},{authzid},"),
        });
        Ok(Step::Continue(server_first.into_bytes()))
    }

    fn client_final(
        &mut self,
        users: &SaslUsers,
        message: &[u8],
        pending: ScramPending,
    ) -> Result<Step, SaslFailure> {
        let text = std::str::from_utf8(message).map_err(|_| SaslFailure::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(SaslFailure::Malformed("no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = fields
            .next()
            .and_then(|f| f.strip_prefix("c="))
            .ok_or(SaslFailure::Malformed("no channel binding"))?;
        if BASE64.decode(binding).ok().as_deref() != Some(pending.gs2_header.as_bytes()) {
            return Err(SaslFailure::Malformed(
                "the channel binding does not repeat the gs2 header",
            ));
        }
        // RFC 5802 wants the nonce repeated as it was. librdkafka before 2.6.1 sends its own
        // nonce in front of it again (librdkafka#4895), which Kafka 3.8.1-3.9 accepted (a
        // nonce that ends with the server's); Debian's kcat links such a librdkafka. So this
        // accepts that too: the proof covers the message as sent, and the server's random
        // part must be there whole.
        let nonce_ok = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .is_some_and(|n| n.ends_with(&pending.nonce));
        if !nonce_ok {
            return Err(SaslFailure::Malformed(
                "the nonce differs from the server's",
            ));
        }
        if fields.next().is_some() {
            return Err(SaslFailure::Unsupported("a SCRAM extension"));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| SaslFailure::Malformed("the proof is not base64"))?;
        let Some(user) = pending.user else {
            return Err(SaslFailure::BadCredentials { user: pending.name });
        };
        let credential = users
            .credential(user, self.mechanism)
            .expect("checked at client-first");
        let user = &users.users[user];
        let (hash, mac, _) = self.mechanism.scram().expect("a SCRAM mechanism");
        let auth_message = format!("{},{without_proof}", pending.messages);
        let signature = hmac::sign(
            &hmac::Key::new(mac, &credential.stored_key),
            auth_message.as_bytes(),
        );
        let failed = || SaslFailure::BadCredentials {
            user: user.name.clone(),
        };
        if proof.len() != signature.as_ref().len() {
            return Err(failed());
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(signature.as_ref())
            .map(|(p, s)| p ^ s)
            .collect();
        let stored = digest::digest(hash, &client_key);
        if !constant_time_eq(stored.as_ref(), &credential.stored_key) {
            return Err(failed());
        }
        let server_signature = hmac::sign(
            &hmac::Key::new(mac, &credential.server_key),
            auth_message.as_bytes(),
        );
        Ok(Step::Done {
            user: user.name.clone(),
            last: format!("v={}", BASE64.encode(server_signature.as_ref())).into_bytes(),
        })
    }
}

/// A SCRAM `saslname`: `=2C` is a comma and `=3D` an equals sign; any other `=` is an error.
fn saslname(text: &str) -> Result<String, SaslFailure> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(SaslFailure::Malformed("a bad escape in a name")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(SaslFailure::Malformed("an empty user name"));
    }
    Ok(out)
}

/// Checks a PLAIN message: the authenticated user's name.
fn plain(users: &SaslUsers, message: &[u8]) -> Result<String, SaslFailure> {
    let malformed = SaslFailure::Malformed("not [authzid] NUL user NUL password");
    let text = std::str::from_utf8(message).map_err(|_| malformed.clone())?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed);
    };
    if user.is_empty() {
        return Err(malformed);
    }
    if !authzid.is_empty() && authzid != user {
        return Err(SaslFailure::Impersonation);
    }
    // Every configured password is compared, so the time taken says nothing about which
    // user exists or how much of a password matched.
    let mut matched = false;
    for u in &users.users {
        let same = constant_time_eq(password.as_bytes(), u.password.as_bytes());
        matched |= same & (u.name == user);
    }
    if matched {
        Ok(user.to_owned())
    } else {
        Err(SaslFailure::BadCredentials {
            user: user.to_owned(),
        })
    }
}

/// Equality whose time depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> SaslUsers {
        SaslUsers::new(
            vec![
                ("alice".into(), "wonderland".into()),
                ("bob".into(), "builder".into()),
            ],
            Mechanism::ALL.to_vec(),
        )
    }

    fn plain_step(u: &SaslUsers, token: &[u8]) -> Step {
        u.start(Mechanism::Plain).unwrap().step(u, token)
    }

    fn done(user: &str) -> Step {
        Step::Done {
            user: user.into(),
            last: Vec::new(),
        }
    }

    fn bad(user: &str) -> Step {
        Step::Failed(SaslFailure::BadCredentials { user: user.into() })
    }

    #[test]
    fn plain_messages() {
        let u = users();
        assert_eq!(plain_step(&u, b"\0alice\0wonderland"), done("alice"));
        assert_eq!(plain_step(&u, b"bob\0bob\0builder"), done("bob"));
        assert_eq!(plain_step(&u, b"\0alice\0builder"), bad("alice"));
        assert_eq!(plain_step(&u, b"\0alice\0wonderlan"), bad("alice"));
        assert_eq!(plain_step(&u, b"\0carol\0wonderland"), bad("carol"));
        assert_eq!(
            plain_step(&u, b"bob\0alice\0wonderland"),
            Step::Failed(SaslFailure::Impersonation)
        );
        for malformed in [
            &b"alice"[..],
            b"\0alice",
            b"\0\0pw",
            b"a\0b\0c\0d",
            b"\0al\xffice\0pw",
        ] {
            assert!(
                matches!(
                    plain_step(&u, malformed),
                    Step::Failed(SaslFailure::Malformed(_))
                ),
                "{malformed:?}"
            );
        }
        assert!(!format!("{u:?}").contains("wonderland"));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"a", b""));
        assert!(!constant_time_eq(b"ab", b"abc"));
        let only_scram = SaslUsers::new(
            vec![("alice".into(), "wonderland".into())],
            vec![Mechanism::ScramSha512],
        );
        assert!(only_scram.start(Mechanism::Plain).is_none());
        assert_eq!(
            Mechanism::parse("SCRAM-SHA-256"),
            Some(Mechanism::ScramSha256)
        );
        assert_eq!(Mechanism::parse("scram-sha-256"), None);
    }

    /// RFC 7677 section 3's example exchange, with its salt, iterations and nonces.
    #[test]
    fn scram_sha_256_matches_rfc_7677() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let mut u = SaslUsers::new(
            vec![("user".into(), "pencil".into())],
            Mechanism::ALL.to_vec(),
        );
        u.users[0].scram_sha256 = Some(ScramCredential::derive(
            Mechanism::ScramSha256,
            "pencil",
            salt,
            4096,
        ));
        let mut x = u.start(Mechanism::ScramSha256).unwrap();
        let first = x.step_with_nonce(
            &u,
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        );
        assert_eq!(
            first,
            Step::Continue(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
                    .to_vec()
            )
        );
        let last = x.step_with_nonce(
            &u,
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            "unused",
        );
        assert_eq!(
            last,
            Step::Done {
                user: "user".into(),
                last: b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec()
            }
        );

        // The same exchange with one bit of the proof flipped, and with another nonce.
        let mut x = u.start(Mechanism::ScramSha256).unwrap();
        x.step_with_nonce(
            &u,
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        );
        let wrong = x.step_with_nonce(
            &u,
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVU=",
            "unused",
        );
        assert_eq!(wrong, bad("user"));
        let mut x = u.start(Mechanism::ScramSha256).unwrap();
        x.step_with_nonce(&u, b"n,,n=user,r=abc", "def");
        assert!(matches!(
            x.step_with_nonce(&u, b"c=biws,r=abcxyz,p=AAAA", "unused"),
            Step::Failed(SaslFailure::Malformed(_))
        ));
        // librdkafka's client-final nonce: its own nonce, then the server's whole nonce.
        let mut x = u.start(Mechanism::ScramSha256).unwrap();
        x.step_with_nonce(&u, b"n,,n=user,r=abc", "def");
        assert_eq!(
            x.step_with_nonce(&u, b"c=biws,r=abcabcdef,p=AAAA", "unused"),
            bad("user"),
            "the nonce is taken, the (made-up) proof is not"
        );
    }

    #[test]
    fn scram_first_messages_are_checked() {
        let u = users();
        let first = |m: &[u8]| u.start(Mechanism::ScramSha512).unwrap().step(&u, m);
        assert!(matches!(first(b"n,,n=alice,r=abc"), Step::Continue(_)));
        assert!(matches!(
            first(b"n,a=alice,n=alice,r=abc"),
            Step::Continue(_)
        ));
        assert_eq!(
            first(b"n,a=bob,n=alice,r=abc"),
            Step::Failed(SaslFailure::Impersonation)
        );
        // An unknown user gets a server-first like a known one (the same salt each time) and
        // fails at client-final.
        let decoy = |name: &str| {
            let mut x = u.start(Mechanism::ScramSha512).unwrap();
            let Step::Continue(reply) = x.step(&u, format!("n,,n={name},r=abc").as_bytes()) else {
                panic!("a server-first for {name}");
            };
            let reply = String::from_utf8(reply).unwrap();
            let salt = reply.split(',').nth(1).unwrap().to_owned();
            let nonce = reply
                .split(',')
                .next()
                .unwrap()
                .trim_start_matches("r=")
                .to_owned();
            let last = x.step(&u, format!("c=biws,r={nonce},p=AAAA").as_bytes());
            (salt, last)
        };
        let (salt, last) = decoy("carol");
        assert_eq!(last, bad("carol"));
        assert_eq!(decoy("carol").0, salt, "the same salt on every try");
        assert_ne!(decoy("dave").0, salt);
        assert!(matches!(
            first(b"p=tls-unique,,n=alice,r=abc"),
            Step::Failed(SaslFailure::Unsupported(_))
        ));
        assert!(matches!(
            first(b"n,,n=alice,r=abc,tokenauth=true"),
            Step::Failed(SaslFailure::Unsupported(_))
        ));
        for malformed in [
            &b"n=alice,r=abc"[..],
            b"n,,n=alice",
            b"n,,n=al=ice,r=x",
            b"x,,n=alice,r=abc",
        ] {
            assert!(
                matches!(first(malformed), Step::Failed(SaslFailure::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(malformed)
            );
        }
        assert_eq!(saslname("a=2Cb=3Dc").unwrap(), "a,b=c");
        // A user whose credential for this hash was not derived (mechanism not offered).
        let only_256 = SaslUsers::new(
            vec![("alice".into(), "wonderland".into())],
            vec![Mechanism::ScramSha256],
        );
        assert!(only_256.start(Mechanism::ScramSha512).is_none());
    }
}
