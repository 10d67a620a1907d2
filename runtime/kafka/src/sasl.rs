//! SASL/PLAIN authentication on the Kafka listener (Kafka's `SASL_PLAINTEXT` and, over TLS,
//! `SASL_SSL` with `sasl.mechanism=PLAIN`), as Kafka's `PlainServerCallbackHandler` does it with
//! users from the broker's JAAS configuration.
//!
//! The exchange (KIP-152): `ApiVersions` (allowed before authentication), `SaslHandshake` v1
//! naming `PLAIN`, then one `SaslAuthenticate` carrying `[authzid] NUL user NUL password`.
//!
//! Invariants:
//! * With users configured, a connection gets no other request served until it has
//!   authenticated; any other request first closes it, as Kafka does.
//! * A failed authentication is answered with `SASL_AUTHENTICATION_FAILED` and a message that
//!   does not say whether the user exists, then the connection is closed.
//! * Passwords are compared in time independent of where they differ; they never appear in
//!   `Debug` output or log lines.
//! * An authorization id other than the user (impersonation) is refused, as Kafka does.
//! * Authenticated users may do everything the listener allows (no ACLs).

use std::fmt;

/// The users of SASL/PLAIN.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PlainUsers {
    users: Vec<(String, String)>,
}

impl fmt::Debug for PlainUsers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("PlainUsers").field("users", &names).finish()
    }
}

/// Why an authentication failed (logged; the client only hears that it failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlainFailure {
    /// The token is not `[authzid] NUL user NUL password` in UTF-8.
    Malformed,
    /// An authorization id other than the user.
    Impersonation,
    /// No such user, or the wrong password.
    BadCredentials { user: String },
}

impl fmt::Display for PlainFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlainFailure::Malformed => f.write_str("a malformed SASL/PLAIN token"),
            PlainFailure::Impersonation => {
                f.write_str("the client asked for an authorization id different from its user name")
            }
            PlainFailure::BadCredentials { user } => {
                write!(f, "unknown user or wrong password for user {user:?}")
            }
        }
    }
}

impl PlainUsers {
    /// The users, as `(name, password)` pairs.
    pub fn new(users: Vec<(String, String)>) -> PlainUsers {
        PlainUsers { users }
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Checks a `SaslAuthenticate` token: the authenticated user's name.
    pub fn authenticate(&self, token: &[u8]) -> Result<String, PlainFailure> {
        let text = std::str::from_utf8(token).map_err(|_| PlainFailure::Malformed)?;
        let mut parts = text.split('\0');
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(PlainFailure::Malformed);
        };
        if user.is_empty() {
            return Err(PlainFailure::Malformed);
        }
        if !authzid.is_empty() && authzid != user {
            return Err(PlainFailure::Impersonation);
        }
        // Every configured password is compared, so the time taken says nothing about which
        // user exists or how much of a password matched.
        let mut matched = false;
        for (name, expected) in &self.users {
            let same = constant_time_eq(password.as_bytes(), expected.as_bytes());
            matched |= same & (name == user);
        }
        if matched {
            Ok(user.to_owned())
        } else {
            Err(PlainFailure::BadCredentials {
                user: user.to_owned(),
            })
        }
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

    fn users() -> PlainUsers {
        PlainUsers::new(vec![
            ("alice".into(), "wonderland".into()),
            ("bob".into(), "builder".into()),
        ])
    }

    #[test]
    fn plain_tokens() {
        let u = users();
        assert_eq!(u.authenticate(b"\0alice\0wonderland"), Ok("alice".into()));
        assert_eq!(u.authenticate(b"bob\0bob\0builder"), Ok("bob".into()));
        assert_eq!(
            u.authenticate(b"\0alice\0builder"),
            Err(PlainFailure::BadCredentials {
                user: "alice".into()
            })
        );
        assert_eq!(
            u.authenticate(b"\0alice\0wonderlan"),
            Err(PlainFailure::BadCredentials {
                user: "alice".into()
            })
        );
        assert_eq!(
            u.authenticate(b"\0carol\0wonderland"),
            Err(PlainFailure::BadCredentials {
                user: "carol".into()
            })
        );
        assert_eq!(
            u.authenticate(b"bob\0alice\0wonderland"),
            Err(PlainFailure::Impersonation)
        );
        for bad in [
            &b"alice"[..],
            b"\0alice",
            b"\0\0pw",
            b"a\0b\0c\0d",
            b"\0al\xffice\0pw",
        ] {
            assert_eq!(u.authenticate(bad), Err(PlainFailure::Malformed), "{bad:?}");
        }
        assert!(!format!("{u:?}").contains("wonderland"));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"a", b""));
        assert!(!constant_time_eq(b"ab", b"abc"));
    }
}
