//! Files mcpmux keeps secrets in (the admin token, the cursor keys): made with mode 0600 in a
//! 0700 directory, opened with `O_CREAT | O_EXCL` so neither a symlink planted there nor a moment
//! of wider permissions exists, and refused — not fixed — when others can read them: a chmod
//! would not un-read what may already have been read.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a private file cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is readable by other users (mode {mode:04o})", path.display())]
    Exposed { path: PathBuf, mode: u32 },
}

/// The text of `path` if it is there (a regular file only its owner can read), else `make()`'s
/// text written there first; with whether it was made now. A daemon that loses the race to make
/// it reads the other's.
pub fn read_or_create(
    path: &Path,
    make: impl FnOnce() -> Result<String, std::io::Error>,
) -> Result<(String, bool), PrivateFileError> {
    match existing(path)? {
        Some(text) => Ok((text, false)),
        None => create(path, make),
    }
}

/// The text of a secret file someone provisioned at `path` (a Kubernetes Secret, say): it must
/// be there, may be a link to a regular file, and may be readable by its group, not by others.
pub fn read_provisioned(path: &Path) -> Result<String, PrivateFileError> {
    let read = |source| PrivateFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if !meta.is_file() {
        return Err(read(std::io::Error::other("it is not a regular file")));
    }
    if meta.mode() & 0o007 != 0 {
        return Err(PrivateFileError::Exposed {
            path: path.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    std::fs::read_to_string(path).map_err(read)
}

/// The text of `path`, if it is there; refused when it is not a regular file only its owner
/// can read.
fn existing(path: &Path) -> Result<Option<String>, PrivateFileError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PrivateFileError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if !meta.is_file() {
        return Err(PrivateFileError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::other("it is not a regular file (a link?)"),
        });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(PrivateFileError::Exposed {
            path: path.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|source| PrivateFileError::Read {
            path: path.to_path_buf(),
            source,
        })
}

fn create(
    path: &Path,
    make: impl FnOnce() -> Result<String, std::io::Error>,
) -> Result<(String, bool), PrivateFileError> {
    let failed = |source| PrivateFileError::Create {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(failed)?;
    }
    let text = make().map_err(failed)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    let mut file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let theirs = existing(path)?.ok_or_else(|| failed(e))?;
            return Ok((theirs, false));
        }
        Err(e) => return Err(failed(e)),
    };
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failed)?;
    Ok((text, true))
}

/// `n` random bytes from the operating system's CSPRNG, in hex.
pub fn random_hex(n: usize) -> Result<String, std::io::Error> {
    use rand::TryRngCore;
    let mut bytes = vec![0u8; n];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(std::io::Error::other)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
