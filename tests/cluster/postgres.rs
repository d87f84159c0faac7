//! A Postgres server of Debian's `postgresql` package for the fleet-store tests, in a temporary
//! directory, on 127.0.0.1 and a port of its own (no system service; `.ci/run` installs the
//! package). Run as the `postgres` user when the tests run as root (initdb refuses root).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::free_port;

pub struct Postgres {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

/// Where the server's programs are: the newest `/usr/lib/postgresql/N/bin`, else `PATH`.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().map_or_else(PathBuf::new, |(_, bin)| bin)
}

fn as_owner(program: &Path) -> Command {
    if nix::unistd::geteuid().is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

impl Postgres {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        if nix::unistd::geteuid().is_root() {
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(
                status.success(),
                "chown postgres (is Debian's postgresql installed?)"
            );
        }
        let bin = bin_dir();
        let data = dir.path().join("data");
        let out = as_owner(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .output()
            .expect("initdb (Debian's postgresql package; .ci/run installs it)");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let postgres = Self {
            port: free_port(),
            _dir: dir,
            data,
            bin,
        };
        postgres.start_again();
        postgres
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.data.display()
        );
        let log = self.data.join("server.log");
        let out = as_owner(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&log)
            .args(["-o", &options, "-w", "-t", "60", "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops the server (`fast`: clients are disconnected at once).
    pub fn stop(&self) {
        let _ = as_owner(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "stop"])
            .output();
    }

    /// What `[cluster] store` names it by.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// `psql -c SQL`'s output (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", "postgres", "-A", "-t", "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_owner(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}
