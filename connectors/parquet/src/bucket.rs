//! S3-compatible object storage as the sink's destination (`parquet.path=s3://bucket/prefix`),
//! through the `object_store` crate.
//!
//! Files are still written to local disk first (a staging directory, `parquet.staging.dir`):
//! Parquet's writer needs a seekable file, and a file must be complete before anyone can see
//! it. A committed file is uploaded (one PUT, or a multipart upload above
//! [`SINGLE_PUT_MAX`]) and then listed by the task's manifest, which is itself one object
//! replaced by a PUT. Both are atomic in S3: an object is either absent or complete, so a reader
//! that follows a manifest sees only complete files, as with the local rename protocol. The
//! manifest is written only after every file it lists is uploaded, and the local staged copy is
//! removed only after its upload, so a crash at any point leaves at most an unlisted object,
//! which the next start deletes.

use std::path::Path;
use std::sync::Arc;

use futures_util::StreamExt;
use headwater_api::ConnectError;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

/// Files up to this size are uploaded with a single PUT; larger ones in parts of
/// [`PART_SIZE`] (S3 allows single PUTs up to 5 GB, but parts bound the memory used and let a
/// failed upload retry one part rather than the whole file).
pub const SINGLE_PUT_MAX: u64 = 32 * 1024 * 1024;
const PART_SIZE: usize = 16 * 1024 * 1024;

/// How to reach a bucket: `parquet.s3.*` settings, falling back to the `AWS_*` environment
/// variables (as the AWS tools read them) for whatever is not set.
#[derive(Clone, Debug, Default)]
pub struct BucketSettings {
    pub bucket: String,
    /// Key prefix inside the bucket (no leading or trailing `/`; may be empty).
    pub prefix: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub virtual_hosted_style: bool,
}

/// Splits `s3://bucket/prefix` (or `s3a://`), `None` for other paths.
pub fn parse_s3_url(raw: &str) -> Option<Result<(String, String), String>> {
    let rest = raw
        .strip_prefix("s3://")
        .or_else(|| raw.strip_prefix("s3a://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Some(Err(format!(
            "{raw:?}: the URL names no bucket (s3://bucket/prefix)"
        )));
    }
    Some(Ok((bucket.to_owned(), prefix.trim_matches('/').to_owned())))
}

/// A bucket (and key prefix) the sink writes to.
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// `s3://bucket/prefix`, for messages.
    url: String,
}

fn store_err(what: &str, key: &str, e: object_store::Error) -> ConnectError {
    // Missing buckets and refused credentials do not heal by retrying.
    match e {
        object_store::Error::NotFound { .. }
        | object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            ConnectError::fatal(format!("{what} {key}: {e}"))
        }
        _ => ConnectError::retriable(format!("{what} {key}: {e}")),
    }
}

impl Bucket {
    pub fn open(s: &BucketSettings) -> Result<Bucket, ConnectError> {
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&s.bucket)
            .with_virtual_hosted_style_request(s.virtual_hosted_style);
        if let Some(e) = &s.endpoint {
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
        }
        if let Some(r) = &s.region {
            b = b.with_region(r);
        } else if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            b = b.with_region("us-east-1");
        }
        if let Some(k) = &s.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(k) = &s.secret_access_key {
            b = b.with_secret_access_key(k);
        }
        let store = b
            .build()
            .map_err(|e| ConnectError::config(format!("parquet.path s3://{}: {e}", s.bucket)))?;
        let url = if s.prefix.is_empty() {
            format!("s3://{}", s.bucket)
        } else {
            format!("s3://{}/{}", s.bucket, s.prefix)
        };
        Ok(Bucket {
            store: Arc::new(store),
            prefix: s.prefix.clone(),
            url,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The object key of `rel` (a `/`-separated path relative to the prefix).
    fn key(&self, rel: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// `key` relative to the prefix.
    fn rel<'k>(&self, key: &'k str) -> &'k str {
        if self.prefix.is_empty() {
            key
        } else {
            key.strip_prefix(self.prefix.as_str())
                .map_or(key, |r| r.trim_start_matches('/'))
        }
    }

    /// Uploads the local file `file` as `rel`, complete or not at all.
    pub async fn upload(&self, file: &Path, rel: &str) -> Result<(), ConnectError> {
        let key = self.key(rel);
        let local =
            |e: std::io::Error| ConnectError::retriable(format!("reading {}: {e}", file.display()));
        let size = std::fs::metadata(file).map_err(local)?.len();
        if size <= SINGLE_PUT_MAX {
            let bytes = std::fs::read(file).map_err(local)?;
            self.store
                .put(&key, PutPayload::from(bytes))
                .await
                .map_err(|e| store_err("uploading", &self.display(rel), e))?;
            return Ok(());
        }
        let upload = self
            .store
            .put_multipart(&key)
            .await
            .map_err(|e| store_err("starting the upload of", &self.display(rel), e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut f = std::fs::File::open(file).map_err(local)?;
        let mut chunk = vec![0u8; PART_SIZE];
        loop {
            let n = std::io::Read::read(&mut f, &mut chunk).map_err(local)?;
            if n == 0 {
                break;
            }
            // At most a few parts are in flight at once.
            writer
                .wait_for_capacity(2)
                .await
                .map_err(|e| store_err("uploading", &self.display(rel), e))?;
            writer.write(&chunk[..n]);
        }
        writer
            .finish()
            .await
            .map_err(|e| store_err("finishing the upload of", &self.display(rel), e))?;
        Ok(())
    }

    /// Replaces object `rel` with `bytes` (atomically, as every S3 PUT).
    pub async fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<(), ConnectError> {
        self.store
            .put(&self.key(rel), PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| store_err("writing", &self.display(rel), e))
    }

    /// Object `rel`, `None` when there is none.
    pub async fn get(&self, rel: &str) -> Result<Option<Vec<u8>>, ConnectError> {
        match self.store.get(&self.key(rel)).await {
            Ok(r) => r
                .bytes()
                .await
                .map(|b| Some(b.to_vec()))
                .map_err(|e| store_err("reading", &self.display(rel), e)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_err("reading", &self.display(rel), e)),
        }
    }

    /// Every object under `rel_dir` (recursively), as paths relative to the prefix.
    pub async fn list(&self, rel_dir: &str) -> Result<Vec<String>, ConnectError> {
        let dir = if rel_dir.is_empty() {
            (!self.prefix.is_empty()).then(|| ObjectPath::from(self.prefix.as_str()))
        } else {
            Some(self.key(rel_dir))
        };
        let mut out = Vec::new();
        let mut listing = self.store.list(dir.as_ref());
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| store_err("listing", &self.display(rel_dir), e))?;
            out.push(self.rel(meta.location.as_ref()).to_owned());
        }
        Ok(out)
    }

    pub async fn delete(&self, rel: &str) -> Result<(), ConnectError> {
        match self.store.delete(&self.key(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_err("deleting", &self.display(rel), e)),
        }
    }

    fn display(&self, rel: &str) -> String {
        format!("{}/{rel}", self.url)
    }
}
