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
/// How much of a block [`Segments::reader`] reads at once.
const READ_PIECE: usize = 64 * 1024;

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

/// A byte range of a segment, as a reader.
struct Range {
    file: Arc<File>,
    offset: u64,
    left: u64,
}

impl std::io::Read for Range {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let Some(buf) = buf.get_mut(..want).filter(|b| !b.is_empty()) else {
            return Ok(0);
        };
        let n = self.file.read_at(buf, self.offset)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the segment ends before the block does",
            ));
        }
        self.offset += n as u64;
        self.left -= n as u64;
        Ok(n)
    }
}

struct Active {
    id: u64,
    file: Arc<File>,
    len: u64,
}

/// The segment being appended to, and those closed whose blocks may not all be indexed yet.
#[derive(Default)]
struct Appending {
    active: Option<Active>,
    /// Closed (for size, or after a failed write), oldest first; `None` once synced. Retention
    /// leaves them alone until [`Segments::release_before`] says their blocks are indexed.
    closed: Vec<(u64, Option<Arc<File>>)>,
}

/// The segment directory: the one file being appended to, and read handles.
pub(super) struct Segments {
    dir: PathBuf,
    appending: Mutex<Appending>,
    readers: Mutex<HashMap<u64, Arc<File>>>,
}

impl Segments {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        let dir = dir.join("segments");
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            appending: Mutex::new(Appending::default()),
            readers: Mutex::new(HashMap::new()),
        })
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:020}.log"))
    }

    /// Appends `bytes` (a block whose first record is `first_seq`) to the current segment, in
    /// the operating system's cache: they outlive the process, and are on disk after
    /// [`Segments::sync`]. Never waits for the disk: a segment closed for size is synced with
    /// the next [`Segments::sync`].
    pub fn write(&self, first_seq: u64, bytes: &[u8]) -> std::io::Result<Location> {
        let len = u32::try_from(bytes.len()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "audit block over 4 GiB")
        })?;
        let mut appending = self
            .appending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Appending { active, closed } = &mut *appending;
        if active.as_ref().is_none_or(|a| a.len >= SEGMENT_BYTES) {
            // Named by its first record. A file of that name can only hold a block that was
            // written but never indexed (a crash in between): nothing points into it.
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(self.path(first_seq))?;
            let new = Active {
                id: first_seq,
                file: Arc::new(file),
                len: 0,
            };
            if let Some(full) = active.replace(new) {
                closed.push((full.id, Some(full.file)));
            }
        }
        let Some(a) = active.as_mut() else {
            unreachable!("a segment was just opened")
        };
        if let Err(e) = (&*a.file).write_all(bytes) {
            // Part of the block may be in the file: the next block starts a new segment rather
            // than follow bytes no location accounts for.
            if let Some(failed) = active.take() {
                closed.push((failed.id, Some(failed.file)));
            }
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

    /// Puts everything written so far on disk. The appender is not held up meanwhile: blocks
    /// it writes during the sync wait for the next one.
    pub fn sync(&self) -> std::io::Result<()> {
        let (closed, active) = {
            let appending = self
                .appending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let closed: Vec<(u64, Arc<File>)> = (appending.closed.iter())
                .filter_map(|(id, file)| Some((*id, Arc::clone(file.as_ref()?))))
                .collect();
            (
                closed,
                appending.active.as_ref().map(|a| Arc::clone(&a.file)),
            )
        };
        for (id, file) in closed {
            file.sync_data()?;
            let mut appending = self
                .appending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = appending.closed.iter_mut().find(|(c, _)| *c == id) {
                entry.1 = None;
            }
        }
        active.map_or(Ok(()), |file| file.sync_data())
    }

    /// Hands the closed segments before `segment` to retention: a block of `segment` is indexed,
    /// so every block before it is.
    pub fn release_before(&self, segment: u64) {
        let mut appending = self
            .appending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        appending
            .closed
            .retain(|(id, file)| *id >= segment || file.is_some());
    }

    /// The bytes at `at`.
    pub fn read(&self, at: Location) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; at.len as usize];
        self.file(at.segment)?.read_exact_at(&mut buf, at.offset)?;
        Ok(buf)
    }

    /// The bytes at `at`, read a piece at a time: a pass over many blocks (retention) holds
    /// none of them whole, which would leave the allocator's high-water mark at a block's size.
    pub fn reader(&self, at: Location) -> std::io::Result<impl std::io::BufRead + use<>> {
        let range = Range {
            file: self.file(at.segment)?,
            offset: at.offset,
            left: u64::from(at.len),
        };
        Ok(std::io::BufReader::with_capacity(READ_PIECE, range))
    }

    /// Segment `id` open for reading (kept for the next read).
    fn file(&self, id: u64) -> std::io::Result<Arc<File>> {
        let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = readers.get(&id) {
            return Ok(Arc::clone(f));
        }
        let f = Arc::new(File::open(self.path(id))?);
        if readers.len() >= READERS {
            readers.clear();
        }
        readers.insert(id, Arc::clone(&f));
        Ok(f)
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

    /// Deletes the segments before segment `first_kept` (all but the active one when `None`),
    /// except those still being written, synced or indexed.
    pub fn remove_before(&self, first_kept: Option<u64>) -> std::io::Result<()> {
        let busy: Vec<u64> = {
            let appending = self
                .appending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let active = appending.active.as_ref().map(|a| a.id);
            active
                .into_iter()
                .chain(appending.closed.iter().map(|(id, _)| *id))
                .collect()
        };
        let limit = first_kept.or(busy.first().copied()).unwrap_or(u64::MAX);
        let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        for id in self.ids()? {
            if id < limit && !busy.contains(&id) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A block read a piece at a time is the block read whole; a segment cut short is an error
    /// that says so, not a short block.
    #[test]
    fn a_block_read_in_pieces_is_the_block_and_a_cut_segment_is_an_error() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path()).unwrap();
        segments.write(1, b"first\n").unwrap();
        let bytes: Vec<u8> = (0..READ_PIECE * 2 + 17).map(|i| (i % 251) as u8).collect();
        let at = segments.write(2, &bytes).unwrap();
        let mut read = Vec::new();
        segments.reader(at).unwrap().read_to_end(&mut read).unwrap();
        assert_eq!(read, segments.read(at).unwrap());
        assert_eq!(read, bytes);

        let file = OpenOptions::new()
            .write(true)
            .open(segments.path(1))
            .unwrap();
        file.set_len(at.offset + 100).unwrap();
        let cut = segments.reader(at).unwrap().read_to_end(&mut Vec::new());
        assert_eq!(cut.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn retention_spares_a_closed_segment_until_it_is_synced_and_a_later_block_is_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::open(dir.path()).unwrap();
        let full = vec![b'\n'; usize::try_from(SEGMENT_BYTES).unwrap()];
        segments.write(1, &full).unwrap();
        let at = segments.write(2, b"{}\n").unwrap();
        assert_eq!(
            (at.segment, at.offset),
            (2, 0),
            "a new segment after a full one"
        );
        // Segment 1 is closed but its blocks are not indexed: retention must not delete it,
        // synced or not, until a block after it is indexed.
        segments.remove_before(None).unwrap();
        assert_eq!(segments.ids().unwrap(), [1, 2]);
        segments.release_before(2);
        segments.remove_before(None).unwrap();
        assert_eq!(segments.ids().unwrap(), [1, 2], "not synced yet");
        segments.sync().unwrap();
        segments.release_before(1);
        segments.remove_before(None).unwrap();
        assert_eq!(
            segments.ids().unwrap(),
            [1, 2],
            "nothing after it indexed yet"
        );
        segments.release_before(2);
        segments.remove_before(None).unwrap();
        assert_eq!(segments.ids().unwrap(), [2], "the active segment stays");
        assert_eq!(segments.read(at).unwrap(), b"{}\n");
    }
}
