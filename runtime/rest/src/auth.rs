//! Optional REST authentication: a Bearer token and/or HTTP Basic users.
//!
//! Invariants:
//! - off when neither a token nor a user is configured (the default): every request passes;
//! - when on, a request passes if its `Authorization` header is `Bearer <token>` with the
//!   configured token, or `Basic <base64(user:password)>` with a configured user; anything
//!   else answers 401 with Kafka Connect's JSON error body and a `WWW-Authenticate` header;
//! - `GET /health` is always open (liveness probes carry no credentials; it reveals nothing);
//! - secrets are compared in constant time and never appear in `Debug` output or logs.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::{RestError, RestState};

/// The configured credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RestAuth {
    /// Accepted `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Accepted Basic users: `(user, password)`.
    pub users: Vec<(String, String)>,
}

impl std::fmt::Debug for RestAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("RestAuth")
            .field("token", &self.token.as_ref().map(|_| "[hidden]"))
            .field("users", &users)
            .finish()
    }
}

impl RestAuth {
    /// Whether any credential is configured.
    pub fn enabled(&self) -> bool {
        self.token.is_some() || !self.users.is_empty()
    }

    /// Whether an `Authorization` header value grants access.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        if !self.enabled() {
            return true;
        }
        let Some(value) = authorization.map(str::trim) else {
            return false;
        };
        let (scheme, credentials) = value.split_once(' ').unwrap_or((value, ""));
        let credentials = credentials.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            return self
                .token
                .as_ref()
                .is_some_and(|t| constant_time_eq(t.as_bytes(), credentials.as_bytes()));
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let Ok(decoded) = BASE64.decode(credentials) else {
                return false;
            };
            let Ok(text) = String::from_utf8(decoded) else {
                return false;
            };
            let Some((user, password)) = text.split_once(':') else {
                return false;
            };
            // Check every user so the time taken does not depend on which one matched.
            let mut ok = false;
            for (u, p) in &self.users {
                let both = constant_time_eq(u.as_bytes(), user.as_bytes())
                    & constant_time_eq(p.as_bytes(), password.as_bytes());
                ok |= both;
            }
            return ok;
        }
        false
    }

    fn challenge(&self) -> &'static str {
        match (self.token.is_some(), self.users.is_empty()) {
            (true, true) => "Bearer realm=\"headwater\"",
            (false, _) => "Basic realm=\"headwater\"",
            (true, false) => "Basic realm=\"headwater\", Bearer realm=\"headwater\"",
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(!x);
    }
    diff == 0
}

/// The middleware: passes allowed requests on, answers 401 to the others.
pub async fn require(
    State(state): State<RestState>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let auth = state.auth();
    let open = request.uri().path() == "/health" && request.method() == Method::GET;
    let header_value = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if open || auth.allows(header_value) {
        return next.run(request).await;
    }
    let message = if header_value.is_some() {
        "Invalid credentials"
    } else {
        "Authentication required: send 'Authorization: Bearer <token>' or HTTP Basic credentials"
    };
    let mut response = RestError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(auth.challenge()),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> String {
        format!("Basic {}", BASE64.encode(format!("{user}:{password}")))
    }

    #[test]
    fn off_by_default() {
        let auth = RestAuth::default();
        assert!(!auth.enabled());
        assert!(auth.allows(None));
        assert!(auth.allows(Some("Bearer whatever")));
    }

    #[test]
    fn bearer_and_basic() {
        let auth = RestAuth {
            token: Some("t0ken".into()),
            users: vec![("alice".into(), "pw:1".into()), ("bob".into(), "x".into())],
        };
        assert!(auth.allows(Some("Bearer t0ken")));
        assert!(auth.allows(Some("bearer   t0ken ")));
        assert!(!auth.allows(Some("Bearer t0ke")));
        assert!(!auth.allows(Some("Bearer t0ken1")));
        assert!(!auth.allows(None));
        assert!(auth.allows(Some(&basic("alice", "pw:1"))));
        assert!(auth.allows(Some(&basic("bob", "x"))));
        assert!(!auth.allows(Some(&basic("bob", "pw:1"))));
        assert!(!auth.allows(Some(&basic("carol", "x"))));
        assert!(!auth.allows(Some("Basic !!!")));
        assert!(!auth.allows(Some("Digest x")));
        let shown = format!("{auth:?}");
        assert!(
            !shown.contains("t0ken") && !shown.contains("pw:1"),
            "{shown}"
        );
    }

    #[test]
    fn constant_time_eq_matches_eq() {
        for (a, b) in [
            ("", ""),
            ("a", ""),
            ("", "a"),
            ("ab", "ab"),
            ("ab", "ac"),
            ("abc", "ab"),
        ] {
            assert_eq!(
                constant_time_eq(a.as_bytes(), b.as_bytes()),
                a == b,
                "{a} {b}"
            );
        }
    }
}
