//! Where tokens are kept besides their files when replicas share them (`[cluster] store`): the
//! daemon sets one [`TokenShelf`]; `store` reads and writes through it, `vault` asks it whom it
//! holds tokens for, and a refresh takes its lock.

use std::path::Path;

/// Where tokens are kept besides their file (an upstream's own, and principals' sealed ones):
/// the fleet store replicas share (`[cluster] store`), so one sign-in serves them all and a
/// refresh is made once for all of them. It holds them opened (it seals them its own way); set
/// once by the daemon.
pub trait TokenShelf: Send + Sync {
    /// The tokens kept for `file` (`None`: the shelf has none; the file is read then).
    fn get(&self, file: &Path) -> Option<Vec<u8>>;
    /// Keeps `bytes` for `file` (written to the file too), for every replica.
    fn put(&self, file: &Path, bytes: &[u8]);
    /// Forgets `file`'s tokens on every replica (a principal's sign-in revoked).
    fn forget(&self, file: &Path);
    /// The names of the files below `dir` it keeps tokens for.
    fn names_under(&self, dir: &Path) -> Vec<String>;
    /// Reads `file`'s tokens from every replica's store again (told another replica stored
    /// them).
    fn fetch<'a>(&'a self, file: &'a Path) -> futures_util::future::BoxFuture<'a, ()>;
    /// Waits until `file`'s tokens as kept here are in the store (before telling the others
    /// they are there).
    fn flush<'a>(
        &'a self,
        file: &'a Path,
    ) -> futures_util::future::BoxFuture<'a, Result<(), String>>;
    /// Holds the fleet-wide lock on `file`'s tokens until the guard is dropped (or stored
    /// through), having read them again: while one replica refreshes, the others wait and then
    /// find them fresh. `None` when the shelf cannot lock now (the store is unreachable): then
    /// nothing is refreshed.
    fn lock<'a>(
        &'a self,
        file: &'a Path,
    ) -> futures_util::future::BoxFuture<'a, Option<Box<dyn ShelfGuard>>>;
}

/// The fleet-wide lock on one upstream's tokens.
pub trait ShelfGuard: Send {
    /// Stores the refreshed tokens under the lock, then lets it go.
    fn store<'a>(
        self: Box<Self>,
        bytes: &'a [u8],
    ) -> futures_util::future::BoxFuture<'a, std::io::Result<()>>;
}

static SHELF: std::sync::OnceLock<Box<dyn TokenShelf>> = std::sync::OnceLock::new();

/// Keeps upstreams' own tokens on `shelf` from now on (the daemon, once).
pub fn set_shelf(shelf: Box<dyn TokenShelf>) {
    let _ = SHELF.set(shelf);
}

/// The shelf, once the daemon set one.
pub(super) fn shelf() -> Option<&'static dyn TokenShelf> {
    SHELF.get().map(|s| &**s)
}
