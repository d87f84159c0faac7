//! Principals' sign-ins under way, kept in the fleet store (`[cluster] store`) so that any
//! replica completes one another replica began: the link's page, the proof of who opens it, the
//! authorization server's redirect and its code exchange may each land anywhere, and the replica
//! whose call waits hears how it ended.
//!
//! A row per upstream and principal (one sign-in under way for both, fleet-wide). Its link and its
//! redirect `state` are kept as digests (a reader of the database learns neither); what the
//! replica needs to go on — the link itself, the PKCE verifier, the client, the DPoP key — is
//! sealed with a key derived from the shared cursor keys and bound to the row. Each step is one
//! statement whose outcome is the fleet's: the link is used once (`issued` → `authorizing`), the
//! redirect claimed once (the row deleted), refusals counted across replicas.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::store::{FleetStore, SIGNINS_CHANNEL, StoreError, announce, ended_payload, timed};
use crate::sealed::SealRing;

/// What the sealing key of sign-ins is derived for.
pub const SIGNINS_PURPOSE: &str = "mcpmux fleet sign-ins";
/// How long a sealed row opens (its row expires long before).
const SEALED_FOR: Duration = Duration::from_secs(24 * 3600);

/// What a replica needs to go on with a sign-in another began (sealed in its row).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Detail {
    /// The link as handed out.
    pub url: String,
    /// What pages and messages call the principal.
    pub name: String,
    pub elicitation_id: String,
    /// The authorization code flow, once its principal went on to the authorization server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<serde_json::Value>,
}

/// A sign-in under way, as the fleet holds it.
#[derive(Debug, Clone)]
pub struct Row {
    /// The digest of the link's id.
    pub link: String,
    pub upstream: String,
    /// The principal's instance key.
    pub principal: String,
    /// Its principal proved who they are and went on to the authorization server.
    pub authorizing: bool,
    /// When the link stops working (microseconds since the epoch).
    pub expires_us: u64,
    pub detail: Detail,
}

/// The sign-ins of the fleet.
pub struct FleetSignIns {
    store: FleetStore,
    ring: SealRing,
}

/// The digest a link id or a `state` is kept under.
pub fn digest(secret: &str) -> String {
    let digest = sha2::Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

const COLUMNS: &str = "link, upstream, principal, stage, expires_us, sealed";

impl FleetSignIns {
    pub fn new(store: FleetStore, ring: SealRing) -> Self {
        Self { store, ring }
    }

    /// Why sign-ins cannot start now, if the store is unreachable.
    pub fn down(&self) -> Option<String> {
        self.store.down()
    }

    /// Offers `row` (a new link): the fleet's sign-in of its upstream and principal is returned —
    /// `row`, or the one another replica began first (expired ones are cleared first).
    pub async fn issue(&self, row: &Row) -> Result<Row, StoreError> {
        let client = self.store.client()?;
        let now = now_us();
        timed(client.execute("DELETE FROM mcpmux_signins WHERE expires_us <= $1", &[&now])).await?;
        let sealed = self.seal(&row.link, &row.detail);
        timed(client.execute(
            "INSERT INTO mcpmux_signins (link, upstream, principal, stage, expires_us, sealed, issued_by)
             VALUES ($1, $2, $3, 'issued', $4, $5, $6) ON CONFLICT (upstream, principal) DO NOTHING",
            &[&row.link, &row.upstream, &row.principal, &to_i64(row.expires_us), &sealed, &self.store.replica()],
        ))
        .await?;
        let found = self.find_for(&row.upstream, &row.principal).await?;
        Ok(found.unwrap_or_else(|| row.clone()))
    }

    /// The fleet's sign-in of `upstream` and `principal` under way, if one is.
    pub async fn find_for(
        &self,
        upstream: &str,
        principal: &str,
    ) -> Result<Option<Row>, StoreError> {
        let client = self.store.client()?;
        let sql = format!(
            "SELECT {COLUMNS} FROM mcpmux_signins WHERE upstream = $1 AND principal = $2 AND expires_us > $3"
        );
        let rows = timed(client.query(sql.as_str(), &[&upstream, &principal, &now_us()])).await?;
        Ok(rows.first().and_then(|r| self.row(r)))
    }

    /// The sign-in whose link has digest `link`, while it lasts.
    pub async fn find(&self, link: &str) -> Result<Option<Row>, StoreError> {
        let client = self.store.client()?;
        let sql =
            format!("SELECT {COLUMNS} FROM mcpmux_signins WHERE link = $1 AND expires_us > $2");
        let rows = timed(client.query(sql.as_str(), &[&link, &now_us()])).await?;
        Ok(rows.first().and_then(|r| self.row(r)))
    }

    /// Counts one more refused proof at link `link`; how many there were, fleet-wide.
    pub async fn refused(&self, link: &str) -> Result<u8, StoreError> {
        let client = self.store.client()?;
        let rows = timed(client.query(
            "UPDATE mcpmux_signins SET failures = failures + 1 WHERE link = $1 RETURNING failures",
            &[&link],
        ))
        .await?;
        let failures: i32 = rows.first().map_or(i32::MAX, |r| r.get(0));
        Ok(u8::try_from(failures).unwrap_or(u8::MAX))
    }

    /// Uses link `link` up (its principal goes on to the authorization server): `false` when it
    /// was used, or expired, already — on any replica.
    pub async fn authorize(&self, link: &str) -> Result<bool, StoreError> {
        let client = self.store.client()?;
        let used = timed(client.execute(
            "UPDATE mcpmux_signins SET stage = 'authorizing'
             WHERE link = $1 AND stage = 'issued' AND expires_us > $2",
            &[&link, &now_us()],
        ))
        .await?;
        Ok(used == 1)
    }

    /// Keeps the flow of link `link` (its `detail` now with the flow), found by its `state`.
    pub async fn flow(&self, link: &str, state: &str, detail: &Detail) -> Result<(), StoreError> {
        let client = self.store.client()?;
        let sealed = self.seal(link, detail);
        timed(client.execute(
            "UPDATE mcpmux_signins SET state = $2, sealed = $3 WHERE link = $1",
            &[&link, &digest(state), &sealed],
        ))
        .await?;
        Ok(())
    }

    /// Claims the flow whose redirect brings `state` back: once for the fleet (the row goes).
    pub async fn claim(&self, state: &str) -> Result<Option<Row>, StoreError> {
        let client = self.store.client()?;
        let sql = format!("DELETE FROM mcpmux_signins WHERE state = $1 RETURNING {COLUMNS}");
        let rows = timed(client.query(sql.as_str(), &[&digest(state)])).await?;
        Ok(rows.first().and_then(|r| self.row(r)))
    }

    /// Ends the sign-in of link `link` with `outcome` for every replica (the replica whose call
    /// waits for it hears).
    pub async fn end(&self, link: &str, outcome: &Result<(), String>) -> Result<(), StoreError> {
        let client = self.store.client()?;
        timed(client.execute("DELETE FROM mcpmux_signins WHERE link = $1", &[&link])).await?;
        announce(&client, SIGNINS_CHANNEL, &ended_payload(link, outcome)).await
    }

    fn seal(&self, link: &str, detail: &Detail) -> String {
        let plain = serde_json::to_vec(detail).unwrap_or_default();
        self.ring.seal(&plain, link.as_bytes(), SEALED_FOR)
    }

    fn row(&self, row: &tokio_postgres::Row) -> Option<Row> {
        let link: String = row.get(0);
        let sealed: String = row.get(5);
        let Some(detail) = (self.ring.open(&sealed, link.as_bytes()).ok())
            .and_then(|plain| serde_json::from_slice(&plain).ok())
        else {
            tracing::warn!(
                "A sign-in in the fleet store does not open with this replica's cursor keys (are they the same on every replica?)."
            );
            return None;
        };
        let stage: String = row.get(3);
        let expires_us: i64 = row.get(4);
        Some(Row {
            link,
            upstream: row.get(1),
            principal: row.get(2),
            authorizing: stage == "authorizing",
            expires_us: u64::try_from(expires_us).unwrap_or_default(),
            detail,
        })
    }
}

fn now_us() -> i64 {
    to_i64(crate::audit::now_us())
}

fn to_i64(us: u64) -> i64 {
    i64::try_from(us).unwrap_or(i64::MAX)
}
