//! Append-only segment files holding the records' bytes. sled keeps the ordered directory of
//! blocks (and the indexes); the bytes of each block live here, so a batch costs one `write`, a
//! share of an `fdatasync`, and a few small sled entries — sled 0.34 rewrites a whole leaf (up to
//! 16 entries) on changes, which for record-sized values cost the gateway more CPU than the calls.
//!
//! A segment is `segments/<first seq, 20 digits>.log`: blocks one after another, each the JSON
//! lines of its records. A new segment starts at every open and once the current one passes
//! [`SEGMENT_BYTES`]; retention deletes whole segments once no block points into them.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// A segment is closed and a new one started once it holds this many bytes.
const SEGMENT_BYTES: u64 = 16 * 1024 * 1024;
/// Open files kept for reading.
const READERS: usize = 16;

/// Where a block's bytes are: its segment, offset and length. Stored in sled as 20 bytes,
/// big-endian `segment ‖ offset ‖ len (u32)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Location {
    pub segment: u64,
    pub offset: u64,
    pub len: u32,
}

impl Location {
    pub const LEN: usize = 20;

    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.segment.to_be_bytes());
        b[8..16].copy_from_slice(&self.offset.to_be_bytes());
        b[16..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = b.try_into().ok()?;
        let u64_at = |i: usize| b[i..i + 8].try_into().ok().map(u64::from_be_bytes);
        let u32_at = |i: usize| b[i..i + 4].try_into().ok().map(u32::from_be_bytes);
        Some(Self {
            segment: u64_at(0)?,
            offset: u64_at(8)?,
            len: u32_at(16)?,
        })
    }
}

struct Active {
    id: u64,
    file: File,
    len: u64,
}

/// The segment directory: the one file being appended to, and read handles.
pub(super) struct Segments {
    dir: PathBuf,
    active: Mutex<Option<Active>>,
    readers: Mutex<HashMap<u64, Arc<File>>>,
}

impl Segments {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        let dir = dir.join("segments");
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            active: Mutex::new(None),
            readers: Mutex::new(HashMap::new()),
        })
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:020}.log"))
    }

    /// Appends `bytes` (a block whose first record is `first_seq`) to the current segment, in
    /// the operating system's cache: they outlive the process, and are on disk after
    /// [`Segments::sync`]. A segment that is closed for size is synced first.
    pub fn write(&self, first_seq: u64, bytes: &[u8]) -> std::io::Result<Location> {
        let len = u32::try_from(bytes.len()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "audit block over 4 GiB")
        })?;
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        if active.as_ref().is_none_or(|a| a.len >= SEGMENT_BYTES) {
            if let Some(full) = active.as_ref() {
                full.file.sync_data()?;
            }
            // Named by its first record. A file of that name can only hold a block that was
            // written but never indexed (a crash in between): nothing points into it.
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(self.path(first_seq))?;
            *active = Some(Active {
                id: first_seq,
                file,
                len: 0,
            });
        }
        let Some(a) = active.as_mut() else {
            unreachable!("a segment was just opened")
        };
        if let Err(e) = a.file.write_all(bytes) {
            // Part of the block may be in the file: the next block starts a new segment rather
            // than follow bytes no location accounts for.
            *active = None;
            return Err(e);
        }
        let at = Location {
            segment: a.id,
            offset: a.len,
            len,
        };
        a.len += u64::from(len);
        Ok(at)
    }

    /// Puts everything written so far on disk.
    pub fn sync(&self) -> std::io::Result<()> {
        match self
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            Some(a) => a.file.sync_data(),
            None => Ok(()),
        }
    }

    /// The bytes at `at`.
    pub fn read(&self, at: Location) -> std::io::Result<Vec<u8>> {
        let file = {
            let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
            match readers.get(&at.segment) {
                Some(f) => Arc::clone(f),
                None => {
                    let f = Arc::new(File::open(self.path(at.segment))?);
                    if readers.len() >= READERS {
                        readers.clear();
                    }
                    readers.insert(at.segment, Arc::clone(&f));
                    f
                }
            }
        };
        let mut buf = vec![0; at.len as usize];
        file.read_exact_at(&mut buf, at.offset)?;
        Ok(buf)
    }

    /// The segments on disk, oldest first.
    pub fn ids(&self) -> std::io::Result<Vec<u64>> {
        let mut ids = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            if let Some(id) = segment_id(&entry?.file_name()) {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// The bytes of segment `id` from `offset` to its end.
    pub fn read_from(&self, id: u64, offset: u64) -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = File::open(self.path(id))?;
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Deletes the segments before segment `first_kept` (all but the active one when `None`).
    pub fn remove_before(&self, first_kept: Option<u64>) -> std::io::Result<()> {
        let active = self
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|a| a.id);
        let limit = first_kept.or(active).unwrap_or(u64::MAX);
        let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        for id in self.ids()? {
            if id < limit && Some(id) != active {
                readers.remove(&id);
                std::fs::remove_file(self.path(id))?;
            }
        }
        Ok(())
    }
}

/// The id of a segment file name (`<20 digits>.log`).
fn segment_id(name: &std::ffi::OsStr) -> Option<u64> {
    name.to_str()?.strip_suffix(".log")?.parse().ok()
}
