//! The fleet store (`[cluster] store = "postgres://…"`): what the replicas of a cluster decide
//! together lives in the Postgres database the team already runs: the tool pins and their
//! approvals, OAuth tokens and dynamically registered clients, principals' sign-ins under way
//! (`signins.rs`). Each replica keeps its own copy (the pin store's, on its disk) and learns
//! what another replica wrote through `LISTEN`/`NOTIFY`; when the database is unreachable it
//! serves from that copy, refuses what must be agreed (an approval, a sign-in) with an error that
//! says why, and catches up when the database returns (it reads every row again and offers what
//! it pinned meanwhile).
//!
//! One connection per replica, kept by a task that reconnects with backoff. At each connection
//! the schema is brought to this binary's version under an advisory lock (`mcpmux_schema` names
//! the versions applied); a database at a newer version than this binary knows is refused: at
//! start the daemon does not start, later the store stays down saying so.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::AsyncMessage;

use crate::config::StoreConfig;
use crate::pins::SharedPin as FleetPin;

/// The schema, one migration per version, applied in order.
const MIGRATIONS: &[&str] = &[
    // 1: tool pins, one row per upstream and tool: the definition the fleet first saw (or last
    // approved), its digest and when it was pinned.
    "CREATE TABLE mcpmux_pins (
        upstream text NOT NULL,
        tool text NOT NULL,
        digest text NOT NULL,
        definition jsonb,
        pinned_us bigint NOT NULL,
        pinned_by text NOT NULL,
        PRIMARY KEY (upstream, tool)
    )",
    // 2: upstreams' own OAuth tokens, sealed with a key derived from the shared cursor keys
    // (the database never holds them in the clear), by where each replica keeps its copy.
    "CREATE TABLE mcpmux_tokens (
        key text PRIMARY KEY,
        sealed text NOT NULL,
        updated_us bigint NOT NULL,
        updated_by text NOT NULL
    )",
    // 3: principals' sign-ins under way (`cluster::signins`): one per upstream and principal,
    // their link and redirect state as digests, what a replica needs to go on sealed.
    "CREATE TABLE mcpmux_signins (
        link text PRIMARY KEY,
        upstream text NOT NULL,
        principal text NOT NULL,
        stage text NOT NULL,
        failures integer NOT NULL DEFAULT 0,
        expires_us bigint NOT NULL,
        state text UNIQUE,
        sealed text NOT NULL,
        issued_by text NOT NULL,
        UNIQUE (upstream, principal)
    )",
];

/// The `NOTIFY` channel a changed pin is announced on (payload: upstream, a tab, the tool).
const PINS_CHANNEL: &str = "mcpmux_pins";
/// The `NOTIFY` channel stored tokens are announced on (payload: their key).
const TOKENS_CHANNEL: &str = "mcpmux_tokens";
/// The `NOTIFY` channel an ended sign-in is announced on (`cluster::signins::parse_ended`).
pub(super) const SIGNINS_CHANNEL: &str = "mcpmux_signins";
/// The advisory lock migrations are applied under (any number, the same for every replica).
const MIGRATION_LOCK: i64 = 0x6d63_706d_7578_0001;
/// How long one statement may take before the store counts as unreachable.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a replica waits between attempts to reach the database, at most.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What the store tells the replica.
#[derive(Debug, Clone)]
pub enum StoreEvent {
    /// Connected (at start, or back after an outage): everything may have changed.
    Connected,
    /// A replica wrote the pin of `upstream`'s `tool`.
    Pin { upstream: String, tool: String },
    /// A replica stored the tokens kept under `key`.
    Tokens { key: String },
    /// A principal's sign-in (its link's digest) ended, with this outcome.
    SignInEnded {
        link: String,
        outcome: Result<(), String>,
    },
}

/// Why the store could not do something.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("the fleet store (Postgres) is unreachable: {0}")]
    Down(String),
    #[error(
        "the fleet store's schema is at version {found}, newer than this mcpmux knows ({known}): a newer mcpmux migrated it; run that version (or newer) on every replica"
    )]
    NewerSchema { found: i32, known: i32 },
    #[error("cannot set up TLS for the fleet store: {0}")]
    Tls(String),
}

type Listener = Box<dyn Fn(StoreEvent) + Send + Sync>;
type Connection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <tokio_postgres_rustls::MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<
        tokio_postgres::Socket,
    >>::Stream,
>;

/// The fleet store; cheap to clone.
#[derive(Clone)]
pub struct FleetStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FleetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetStore")
            .field("down", &self.down())
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: StoreConfig,
    replica: String,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    client: arc_swap::ArcSwapOption<tokio_postgres::Client>,
    /// Why it is down (`None` while connected).
    down: Mutex<Option<String>>,
    listener: OnceLock<Listener>,
}

impl FleetStore {
    /// Starts keeping a connection to the database `config` names; the first attempt's outcome
    /// is what [`Self::first_connection`] waits for.
    pub fn start(config: &StoreConfig, replica: &str) -> Result<Self, StoreError> {
        let inner = Arc::new(Inner {
            config: config.clone(),
            replica: replica.to_owned(),
            tls: tls(config)?,
            client: arc_swap::ArcSwapOption::empty(),
            down: Mutex::new(Some("not connected yet".to_owned())),
            listener: OnceLock::new(),
        });
        Ok(Self { inner })
    }

    /// Where events go (set once, before [`Self::run`]).
    pub fn on_event(&self, listener: impl Fn(StoreEvent) + Send + Sync + 'static) {
        let _ = self.inner.listener.set(Box::new(listener));
    }

    /// Connects and keeps connecting; the first attempt's outcome is returned (within
    /// `within`): `Ok(true)` connected, `Ok(false)` unreachable (the replica goes on from its
    /// own copy), an error when the schema is newer than this binary.
    pub async fn run(&self, within: Duration) -> Result<bool, StoreError> {
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(Arc::clone(&self.inner).supervise(first_tx));
        match tokio::time::timeout(within, first_rx).await {
            Ok(Ok(Ok(()))) => Ok(true),
            Ok(Ok(Err(e @ StoreError::NewerSchema { .. }))) => Err(e),
            Ok(Ok(Err(_)) | Err(_)) | Err(_) => Ok(false),
        }
    }

    /// Why the store is unreachable, or `None` while it is connected.
    pub fn down(&self) -> Option<String> {
        self.inner
            .down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// This replica's name, as rows it writes say.
    pub(super) fn replica(&self) -> &str {
        &self.inner.replica
    }

    pub(super) fn client(&self) -> Result<Arc<tokio_postgres::Client>, StoreError> {
        self.inner
            .client
            .load_full()
            .ok_or_else(|| StoreError::Down(self.down().unwrap_or_default()))
    }

    /// Every pin of the fleet.
    pub async fn pins(&self) -> Result<Vec<FleetPin>, StoreError> {
        let client = self.client()?;
        let rows = timed(client.query(
            "SELECT upstream, tool, digest, definition, pinned_us FROM mcpmux_pins",
            &[],
        ))
        .await?;
        Ok(rows.iter().map(pin_of).collect())
    }

    /// The fleet's pin of `upstream`'s `tool`, if there is one.
    pub async fn pin(&self, upstream: &str, tool: &str) -> Result<Option<FleetPin>, StoreError> {
        let client = self.client()?;
        let rows = timed(client.query(
            "SELECT upstream, tool, digest, definition, pinned_us FROM mcpmux_pins WHERE upstream = $1 AND tool = $2",
            &[&upstream, &tool],
        ))
        .await?;
        Ok(rows.first().map(pin_of))
    }

    /// Offers pins this replica made: the first written for a tool wins. Returns the fleet's
    /// pins of those tools (the winners).
    pub async fn pin_first(&self, pins: &[FleetPin]) -> Result<Vec<FleetPin>, StoreError> {
        let client = self.client()?;
        let mut winners = Vec::with_capacity(pins.len());
        for pin in pins {
            let inserted = self.write(&client, pin, "DO NOTHING").await?;
            if inserted > 0 {
                announce(&client, PINS_CHANNEL, &pin_payload(pin)).await?;
            }
            winners.extend(self.pin(&pin.upstream, &pin.tool).await?);
        }
        Ok(winners)
    }

    /// Pins `pin` (an approved definition) for the whole fleet and announces it; an error when
    /// the database cannot be reached, so no replica approves alone.
    pub async fn approve(&self, pin: &FleetPin) -> Result<(), StoreError> {
        let client = self.client()?;
        let update = "DO UPDATE SET digest = EXCLUDED.digest, definition = EXCLUDED.definition,
                      pinned_us = EXCLUDED.pinned_us, pinned_by = EXCLUDED.pinned_by";
        self.write(&client, pin, update).await?;
        announce(&client, PINS_CHANNEL, &pin_payload(pin)).await
    }
}

/// The fleet-wide lock on one key's tokens: a transaction on a connection of its own holding
/// an advisory lock; dropping it ends the connection, which rolls back and lets go.
pub struct TokenLock {
    client: tokio_postgres::Client,
    key: String,
    replica: String,
    /// The sealed tokens as the fleet held them when the lock was taken.
    pub sealed: Option<String>,
}

impl TokenLock {
    /// Stores `sealed` under the key, announces it and lets the lock go.
    pub async fn store(self, sealed: &str) -> Result<(), StoreError> {
        put_tokens(&self.client, (&self.key, sealed), &self.replica).await?;
        timed(self.client.batch_execute("COMMIT")).await
    }
}

/// Writes `sealed` under `key` and announces it.
async fn put_tokens(
    client: &tokio_postgres::Client,
    (key, sealed): (&str, &str),
    replica: &str,
) -> Result<(), StoreError> {
    let now = i64::try_from(crate::audit::now_us()).unwrap_or(i64::MAX);
    timed(client.execute(
        "INSERT INTO mcpmux_tokens (key, sealed, updated_us, updated_by) VALUES ($1, $2, $3, $4)
         ON CONFLICT (key) DO UPDATE SET sealed = EXCLUDED.sealed,
             updated_us = EXCLUDED.updated_us, updated_by = EXCLUDED.updated_by",
        &[&key, &sealed, &now, &replica],
    ))
    .await?;
    announce(client, TOKENS_CHANNEL, key).await
}

impl FleetStore {
    /// The sealed tokens kept under `key`, if any.
    pub async fn tokens(&self, key: &str) -> Result<Option<String>, StoreError> {
        let client = self.client()?;
        self.tokens_on(&client, key).await
    }

    /// Every key and its sealed tokens.
    pub async fn all_tokens(&self) -> Result<Vec<(String, String)>, StoreError> {
        let client = self.client()?;
        let rows = timed(client.query("SELECT key, sealed FROM mcpmux_tokens", &[])).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Stores `sealed` under `key` for the fleet (without the lock: a sign-in's new tokens).
    pub async fn put_tokens(&self, key: &str, sealed: &str) -> Result<(), StoreError> {
        let client = self.client()?;
        put_tokens(&client, (key, sealed), &self.inner.replica).await
    }

    /// Deletes the tokens kept under `key` for the fleet, and announces it.
    pub async fn forget_tokens(&self, key: &str) -> Result<(), StoreError> {
        let client = self.client()?;
        timed(client.execute("DELETE FROM mcpmux_tokens WHERE key = $1", &[&key])).await?;
        announce(&client, TOKENS_CHANNEL, key).await
    }

    /// Takes the fleet-wide lock on `key`'s tokens (waiting while another replica holds it,
    /// refreshing them) and reads them.
    pub async fn lock_tokens(&self, key: &str) -> Result<TokenLock, StoreError> {
        self.client()?;
        let (client, connection) = self.inner.open().await?;
        tokio::spawn(connection);
        timed(client.batch_execute("BEGIN")).await?;
        let held = tokio::time::timeout(
            STATEMENT_TIMEOUT * 10,
            client.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key]),
        )
        .await;
        match held {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(StoreError::Down(crate::http_body::error_chain(&e))),
            Err(_) => {
                return Err(StoreError::Down(
                    "another replica held the tokens' lock too long".into(),
                ));
            }
        }
        let sealed = self.tokens_on(&client, key).await?;
        Ok(TokenLock {
            sealed,
            client,
            key: key.to_owned(),
            replica: self.inner.replica.clone(),
        })
    }

    async fn tokens_on(
        &self,
        client: &tokio_postgres::Client,
        key: &str,
    ) -> Result<Option<String>, StoreError> {
        let rows =
            timed(client.query("SELECT sealed FROM mcpmux_tokens WHERE key = $1", &[&key])).await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// Inserts `pin`, doing `on_conflict` where the tool has one; the rows written.
    async fn write(
        &self,
        client: &tokio_postgres::Client,
        pin: &FleetPin,
        on_conflict: &str,
    ) -> Result<u64, StoreError> {
        let pinned_us = i64::try_from(pin.pinned_us).unwrap_or(i64::MAX);
        let sql = format!(
            "INSERT INTO mcpmux_pins (upstream, tool, digest, definition, pinned_us, pinned_by)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (upstream, tool) {on_conflict}"
        );
        timed(client.execute(
            sql.as_str(),
            &[
                &pin.upstream,
                &pin.tool,
                &pin.digest,
                &pin.definition,
                &pinned_us,
                &self.inner.replica,
            ],
        ))
        .await
    }
}

/// Tells every replica (this one too) on `channel` that `payload` was written.
pub(super) async fn announce(
    client: &tokio_postgres::Client,
    channel: &str,
    payload: &str,
) -> Result<(), StoreError> {
    timed(client.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])).await?;
    Ok(())
}

/// The longest reason an ended sign-in is announced with (`NOTIFY` payloads are small).
const MAX_REASON: usize = 1000;

/// What an ended sign-in is announced with: its link's digest, a tab, `ok` or `error`, a tab and
/// why.
pub(super) fn ended_payload(link: &str, outcome: &Result<(), String>) -> String {
    match outcome {
        Ok(()) => format!("{link}\tok"),
        Err(why) => {
            let why: String = (why.chars().take(MAX_REASON))
                .map(|c| if c == '\t' { ' ' } else { c })
                .collect();
            format!("{link}\terror\t{why}")
        }
    }
}

/// An ended sign-in as [`ended_payload`] announced it.
fn parse_ended(payload: &str) -> Option<(String, Result<(), String>)> {
    let (link, rest) = payload.split_once('\t')?;
    let outcome = match rest.split_once('\t') {
        None if rest == "ok" => Ok(()),
        Some(("error", why)) => Err(why.to_owned()),
        _ => return None,
    };
    Some((link.to_owned(), outcome))
}

/// What a changed pin is announced with: its upstream, a tab, its tool.
fn pin_payload(pin: &FleetPin) -> String {
    format!("{}\t{}", pin.upstream, pin.tool)
}

impl Inner {
    fn set_down(&self, why: Option<String>) {
        let mut down = self
            .down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (&*down, &why) {
            (None, Some(why)) => {
                tracing::warn!(error = %why, "The fleet store (Postgres) is unreachable: serving from this replica's copy; approvals are refused until it is back.");
            }
            (Some(_), None) => tracing::info!("Connected to the fleet store (Postgres)."),
            _ => {}
        }
        *down = why;
    }

    fn tell(&self, event: StoreEvent) {
        if let Some(listener) = self.listener.get() {
            listener(event);
        }
    }

    /// One connection to the database (its messages come on the returned connection).
    async fn open(&self) -> Result<(tokio_postgres::Client, Connection), StoreError> {
        let mut pg: tokio_postgres::Config = (self.config.url.parse())
            .map_err(|e: tokio_postgres::Error| StoreError::Down(e.to_string()))?;
        if let Some(source) = &self.config.password {
            let password = source
                .read()
                .map_err(|e| StoreError::Down(format!("its password: {e}")))?;
            pg.password(password);
        }
        pg.application_name(format!("mcpmux {}", self.replica));
        pg.connect_timeout(STATEMENT_TIMEOUT);
        pg.connect(self.tls.clone())
            .await
            .map_err(|e| StoreError::Down(crate::http_body::error_chain(&e)))
    }

    /// Connects, migrates, listens; again after every loss, backing off.
    async fn supervise(
        self: Arc<Self>,
        first: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
    ) {
        let mut first = Some(first);
        let mut backoff = Duration::from_millis(250);
        loop {
            match self.connect().await {
                Ok((client, mut notices)) => {
                    self.client.store(Some(Arc::new(client)));
                    self.set_down(None);
                    if let Some(first) = first.take() {
                        let _ = first.send(Ok(()));
                    }
                    backoff = Duration::from_millis(250);
                    self.tell(StoreEvent::Connected);
                    let lost = loop {
                        match notices.recv().await {
                            Some(Ok(event)) => self.tell(event),
                            Some(Err(why)) => break why,
                            None => break "the connection ended".to_owned(),
                        }
                    };
                    self.client.store(None);
                    self.set_down(Some(lost));
                }
                Err(e) => {
                    self.set_down(Some(e.to_string()));
                    if let Some(first) = first.take() {
                        let _ = first.send(Err(e));
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One connection, its schema current, listening; its notices (and how it ended) arrive on
    /// the receiver.
    async fn connect(
        &self,
    ) -> Result<
        (
            tokio_postgres::Client,
            tokio::sync::mpsc::UnboundedReceiver<Result<StoreEvent, String>>,
        ),
        StoreError,
    > {
        let (client, mut connection) = self.open().await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) if n.channel() == TOKENS_CHANNEL => {
                        let _ = tx.send(Ok(StoreEvent::Tokens {
                            key: n.payload().to_owned(),
                        }));
                    }
                    Ok(AsyncMessage::Notification(n)) if n.channel() == SIGNINS_CHANNEL => {
                        if let Some((link, outcome)) = parse_ended(n.payload()) {
                            let _ = tx.send(Ok(StoreEvent::SignInEnded { link, outcome }));
                        }
                    }
                    Ok(AsyncMessage::Notification(n)) if n.channel() == PINS_CHANNEL => {
                        if let Some((upstream, tool)) = n.payload().split_once('\t') {
                            let _ = tx.send(Ok(StoreEvent::Pin {
                                upstream: upstream.to_owned(),
                                tool: tool.to_owned(),
                            }));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(crate::http_body::error_chain(&e)));
                        return;
                    }
                }
            }
        });
        migrate(&client).await?;
        timed(client.batch_execute(&format!(
            "LISTEN {PINS_CHANNEL}; LISTEN {TOKENS_CHANNEL}; LISTEN {SIGNINS_CHANNEL}"
        )))
        .await?;
        Ok((client, rx))
    }
}

/// Brings the schema to this binary's version, under an advisory lock so that replicas
/// starting together apply each migration once; refuses a newer schema.
async fn migrate(client: &tokio_postgres::Client) -> Result<(), StoreError> {
    let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
    timed(client.batch_execute("BEGIN")).await?;
    let applied = async {
        timed(client.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])).await?;
        // Made under the lock: replicas starting together would race to create it.
        timed(client.batch_execute(
            "CREATE TABLE IF NOT EXISTS mcpmux_schema (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        ))
        .await?;
        let row =
            timed(client.query_one("SELECT coalesce(max(version), 0) FROM mcpmux_schema", &[]))
                .await?;
        let found: i32 = row.get(0);
        if found > known {
            return Err(StoreError::NewerSchema { found, known });
        }
        for (version, sql) in (1..)
            .zip(MIGRATIONS)
            .skip(usize::try_from(found).unwrap_or(0))
        {
            timed(client.batch_execute(sql)).await?;
            timed(client.execute(
                "INSERT INTO mcpmux_schema (version) VALUES ($1)",
                &[&version],
            ))
            .await?;
            tracing::info!(version, "Migrated the fleet store's schema.");
        }
        Ok(())
    }
    .await;
    let end = if applied.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    let ended = timed(client.batch_execute(end)).await;
    applied.and(ended)
}

/// A statement with the store's timeout; its failure as the store being down.
pub(super) async fn timed<T>(
    statement: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(STATEMENT_TIMEOUT, statement).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(StoreError::Down(crate::http_body::error_chain(&e))),
        Err(_) => Err(StoreError::Down(format!(
            "no answer within {}s",
            STATEMENT_TIMEOUT.as_secs()
        ))),
    }
}

fn pin_of(row: &tokio_postgres::Row) -> FleetPin {
    let pinned_us: i64 = row.get(4);
    FleetPin {
        upstream: row.get(0),
        tool: row.get(1),
        digest: row.get(2),
        definition: row.get(3),
        pinned_us: u64::try_from(pinned_us).unwrap_or_default(),
    }
}

/// TLS as the URL's `sslmode` asks, verified against the system's roots and `ca_file`.
fn tls(config: &StoreConfig) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = &config.ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| StoreError::Tls(format!("{}: {e}", path.display())))?;
        for cert in certs {
            let cert = cert.map_err(|e| StoreError::Tls(format!("{}: {e}", path.display())))?;
            roots
                .add(cert)
                .map_err(|e| StoreError::Tls(format!("{}: {e}", path.display())))?;
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_sign_in_is_announced_and_read_back() {
        let ok = ended_payload("ab12", &Ok(()));
        assert_eq!(parse_ended(&ok), Some(("ab12".into(), Ok(()))));
        let refused = ended_payload("ab12", &Err("refused:\taccess_denied".into()));
        assert_eq!(
            parse_ended(&refused),
            Some(("ab12".into(), Err("refused: access_denied".into())))
        );
        assert_eq!(parse_ended("ab12"), None);
        assert_eq!(parse_ended("ab12\tmaybe"), None);
    }
}
