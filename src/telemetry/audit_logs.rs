//! The audit trail off the box (`[audit] export = "otlp"`): every sealed record also leaves as an
//! OpenTelemetry log record, through the OTLP endpoint and protocol traces use. The writer offers
//! each batch it wrote to a bounded queue (`audit::Outbox`); this thread sends them in order,
//! [`MAX_SHIPMENT`] records at a time, and tries a shipment again until the receiver takes it
//! (backing off), so a record is lost to the receiver only when the queue was full — counted in
//! `mcpmux_audit_export_dropped_total` and, as an `audit.export_dropped` record, in the chain
//! itself. A receiver that deduplicates on (chain, sequence) holds each record exactly once.
//!
//! Each log record's body is the record's JSON line as stored (so the chain can be verified off
//! the box); its attributes name the chain, the sequence number, the hash, the previous hash and
//! the replica. Every `head_interval` a `mcpmux.audit.head` record names the chain's last
//! sequence number and hash: a tail cut off after it is visible to whoever reads the receiver.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::InstrumentationScope;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry_sdk::logs::{LogBatch, LogExporter as _, SdkLogRecord, SdkLoggerProvider};

use super::otel::Export;
use crate::audit::{ExportCounts, Parcel, Record, WeakAudit};

/// Records sent in one OTLP request at most.
const MAX_SHIPMENT: usize = 512;
/// How long a refused shipment waits before it goes again, at most.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Where and as what the records leave.
#[derive(Debug, Clone)]
pub struct Shipping {
    /// The chain's name: the replica's (`[cluster]`), else the host's.
    pub chain: String,
    /// `[cluster] replica`, when there is one.
    pub replica: Option<String>,
    /// How often the chain's head is sent.
    pub head_interval: Duration,
}

/// Why the audit export could not start.
#[derive(Debug, thiserror::Error)]
pub enum AuditExportError {
    #[error(
        "[audit] export = \"otlp\" needs an OTLP endpoint: set [telemetry] otlp_endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT)"
    )]
    NoEndpoint,
    #[error("cannot set up the OTLP log exporter for the audit export: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("cannot start the audit export's thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The exporter thread while it runs.
#[derive(Debug)]
pub struct AuditExport {
    thread: std::thread::JoinHandle<()>,
    counts: Arc<ExportCounts>,
}

impl AuditExport {
    /// Waits (at most `deadline`) until everything offered so far has left (the writer has
    /// written what was sealed: the audit log is closed first).
    pub fn finish(self, deadline: Duration) {
        let until = Instant::now() + deadline;
        while self.counts.queued() > 0 && !self.thread.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.counts.queued() > 0 {
            tracing::warn!(
                waiting = self.counts.queued(),
                "Stopping with audit records not exported (the OTLP receiver did not take them); the local audit log has them."
            );
        }
    }
}

/// Starts the thread that ships `parcels` (within the tokio runtime, as gRPC needs).
pub fn start(
    export: Option<&Export>,
    shipping: Shipping,
    (parcels, counts): (Receiver<Parcel>, Arc<ExportCounts>),
    audit: WeakAudit,
) -> Result<AuditExport, AuditExportError> {
    let export = export.ok_or(AuditExportError::NoEndpoint)?;
    let exporter = exporter(export)?;
    let resource = super::otel::resource(export);
    let mut exporter = exporter;
    exporter.set_resource(&resource);
    // Records are made by a logger of a provider with no processor: they go nowhere but here.
    let logger = SdkLoggerProvider::builder()
        .with_resource(resource)
        .build()
        .logger("mcpmux.audit");
    let shipper = Shipper {
        exporter,
        logger,
        scope: InstrumentationScope::builder("mcpmux.audit").build(),
        shipping,
        counts: Arc::clone(&counts),
        audit,
        reported_drops: 0,
    };
    let thread = std::thread::Builder::new()
        .name("mcpmux-audit-export".into())
        .spawn(move || {
            let run = std::panic::AssertUnwindSafe(|| shipper.run(parcels));
            if std::panic::catch_unwind(run).is_err() {
                tracing::error!("The audit export stopped (a bug: please report it); records stay in the local audit log.");
            }
        })?;
    Ok(AuditExport { thread, counts })
}

fn exporter(
    export: &Export,
) -> Result<opentelemetry_otlp::LogExporter, opentelemetry_otlp::ExporterBuildError> {
    super::otel::otlp_exporter!(opentelemetry_otlp::LogExporter, export, "logs")
}

struct Shipper {
    exporter: opentelemetry_otlp::LogExporter,
    logger: opentelemetry_sdk::logs::SdkLogger,
    scope: InstrumentationScope,
    shipping: Shipping,
    counts: Arc<ExportCounts>,
    audit: WeakAudit,
    /// The drops already recorded in the chain.
    reported_drops: u64,
}

impl Shipper {
    /// Ships parcels as they come, the head every `head_interval`, until the writer is gone and
    /// everything it offered has left.
    fn run(mut self, parcels: Receiver<Parcel>) {
        let mut next_head = Instant::now() + self.shipping.head_interval;
        let mut pending: Vec<Parcel> = Vec::new();
        loop {
            let wait = next_head.saturating_duration_since(Instant::now());
            let open = match parcels.recv_timeout(wait) {
                Ok(parcel) => {
                    pending.push(parcel);
                    true
                }
                Err(RecvTimeoutError::Timeout) => true,
                Err(RecvTimeoutError::Disconnected) => false,
            };
            let mut records: usize = pending.iter().map(|p| p.records).sum();
            while records < MAX_SHIPMENT {
                let Ok(parcel) = parcels.try_recv() else {
                    break;
                };
                records += parcel.records;
                pending.push(parcel);
            }
            if !pending.is_empty() {
                self.ship(&pending);
                pending.clear();
            }
            if Instant::now() >= next_head || !open {
                self.note_drops();
                self.send_head();
                next_head = Instant::now() + self.shipping.head_interval;
            }
            if !open {
                let _ = self.exporter.shutdown();
                return;
            }
        }
    }

    /// Sends the records of `parcels`, each shipment again until the receiver takes it.
    fn ship(&self, parcels: &[Parcel]) {
        let records: Vec<SdkLogRecord> = (parcels.iter())
            .flat_map(Parcel::records)
            .map(|line| self.log_record(line))
            .collect();
        for shipment in records.chunks(MAX_SHIPMENT) {
            self.send_until_taken(shipment);
            self.counts.shipped(shipment.len());
        }
    }

    fn send_until_taken(&self, shipment: &[SdkLogRecord]) {
        let mut backoff = Duration::from_millis(250);
        let mut failures = 0u32;
        loop {
            match self.send(shipment) {
                Ok(()) => {
                    if failures > 0 {
                        tracing::info!(failures, "The OTLP receiver takes audit records again.");
                    }
                    return;
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(error = %e, "The OTLP receiver did not take audit records; trying again (they stay queued; the local audit log has them).");
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    fn send(&self, shipment: &[SdkLogRecord]) -> opentelemetry_sdk::error::OTelSdkResult {
        let pairs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            shipment.iter().map(|r| (r, &self.scope)).collect();
        futures_executor::block_on(self.exporter.export(LogBatch::new(&pairs)))
    }

    /// One audit record as a log record: its line the body, its place in the chain attributes.
    fn log_record(&self, line: &[u8]) -> SdkLogRecord {
        #[derive(serde::Deserialize)]
        struct Place<'a> {
            seq: u64,
            ts_us: u64,
            #[serde(borrow)]
            prev_hash: &'a str,
            #[serde(borrow)]
            hash: &'a str,
        }
        let text = String::from_utf8_lossy(line);
        let mut record = self.logger.create_log_record();
        record.set_event_name("mcpmux.audit.record");
        record.set_severity_number(Severity::Info);
        record.set_severity_text("INFO");
        if let Ok(place) = serde_json::from_str::<Place<'_>>(&text) {
            record.set_timestamp(UNIX_EPOCH + Duration::from_micros(place.ts_us));
            self.chain_attributes(&mut record, place.seq, place.hash);
            record.add_attribute("mcpmux.audit.prev_hash", place.prev_hash.to_owned());
        }
        record.set_observed_timestamp(SystemTime::now());
        record.set_body(AnyValue::String(text.into_owned().into()));
        record
    }

    fn chain_attributes(&self, record: &mut SdkLogRecord, seq: u64, hash: &str) {
        record.add_attribute("mcpmux.audit.chain", self.shipping.chain.clone());
        record.add_attribute("mcpmux.audit.seq", i64::try_from(seq).unwrap_or(i64::MAX));
        record.add_attribute("mcpmux.audit.hash", hash.to_owned());
        if let Some(replica) = &self.shipping.replica {
            record.add_attribute("mcpmux.replica", replica.clone());
        }
    }

    /// Records in the chain how many records the export dropped since the last such record.
    fn note_drops(&mut self) {
        let dropped = self.counts.dropped();
        if dropped == self.reported_drops {
            return;
        }
        let Some(audit) = self.audit.upgrade() else {
            return;
        };
        let detail = format!(
            "{} audit records were not exported (the export queue was full); {dropped} since start",
            dropped - self.reported_drops
        );
        audit.record(Record::event(
            "audit.export_dropped",
            None,
            None,
            Some(detail),
        ));
        self.reported_drops = dropped;
    }

    /// Sends the chain's head (one try: the next one follows).
    fn send_head(&self) {
        let Some((seq, hash)) = self.audit.upgrade().and_then(|a| a.head()) else {
            return;
        };
        let mut record = self.logger.create_log_record();
        record.set_event_name("mcpmux.audit.head");
        record.set_severity_number(Severity::Info);
        record.set_severity_text("INFO");
        record.set_timestamp(SystemTime::now());
        record.set_observed_timestamp(SystemTime::now());
        self.chain_attributes(&mut record, seq, &hash);
        let exported = i64::try_from(self.counts.exported()).unwrap_or(i64::MAX);
        let dropped = i64::try_from(self.counts.dropped()).unwrap_or(i64::MAX);
        record.add_attribute("mcpmux.audit.exported", exported);
        record.add_attribute("mcpmux.audit.dropped", dropped);
        record.set_body(AnyValue::String(
            format!("audit chain {} at {seq}", self.shipping.chain).into(),
        ));
        if let Err(e) = self.send(std::slice::from_ref(&record)) {
            tracing::debug!(error = %e, "Could not send the audit chain's head.");
        }
    }
}
