//! The public data types: what a caller submits, what a fetch returns, and what a job looks like.

use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// How a target is to be fetched. Opaque to rota: it is stored, hashed into the idempotency key
/// and handed to the fetch unchanged.
///
/// Serializes with its fields in declaration order; empty strings, `None` and `false` are omitted,
/// so `Options::default()` is `{}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// The fetcher's mode (for example `text`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// A question to answer from the page.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub question: String,
    /// Which pages of a document to read.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pages: String,
    /// A pattern whose matching lines are kept.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub grep: String,
    /// A jq program applied to a JSON body.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub jq: String,
    /// Whether to include context; `None` is the fetcher's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<bool>,
    /// Whether the fetcher should try to recover a failed page.
    #[serde(skip_serializing_if = "is_false")]
    pub recover: bool,
}

impl Options {
    /// The JSON stored for these options (as `serde_json::to_string`).
    pub fn to_json(&self) -> String {
        // The default options (most targets' options) serialize to `{}` with no field: no need
        // to run the serializer for them.
        if *self == Options::default() {
            return String::from("{}");
        }
        // Strings, an Option<bool> and a bool always serialize.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Options decoded from their stored JSON.
    pub fn from_json(json: &str) -> Result<Options, serde_json::Error> {
        // What to_json writes for the default options needs no parse.
        if json == "{}" {
            return Ok(Options::default());
        }
        serde_json::from_str(json)
    }
}

/// One thing to fetch: a URL and its options. JSON: `{"url":..,"options":{..}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Target {
    /// What to fetch. Never logged.
    pub url: String,
    /// How to fetch it.
    #[serde(default)]
    pub options: Options,
}

/// A finished target: its content, and anything else the fetcher reports in `meta`.
/// JSON: `meta` is omitted when empty.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TargetResult {
    /// The fetched content.
    pub content: String,
    /// Any other fields the fetcher reports (status, content type, …).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub meta: serde_json::Map<String, serde_json::Value>,
}

/// How deeply a value in [`TargetResult::meta`] may nest (arrays and objects inside it): the
/// most that a [`JobView`] holding the result (as `rota status` prints it), read back with
/// `serde_json`'s recursion limit of 128, can hold: the view, its `targets`, the target, the
/// result and `meta` take five.
pub const MAX_META_DEPTH: usize = 122;

impl TargetResult {
    /// The JSON stored for this result (as `serde_json::to_string`). An error if a `meta` value
    /// nests deeper than [`MAX_META_DEPTH`]: stored, it could not be read back in a view.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        if let Some(key) = self
            .meta
            .iter()
            .find_map(|(k, v)| nests_deeper(v, MAX_META_DEPTH).then_some(k))
        {
            return Err(<serde_json::Error as serde::ser::Error>::custom(format!(
                "meta field {key:?} nests deeper than {MAX_META_DEPTH} levels"
            )));
        }
        serde_json::to_string(self)
    }

    /// A result decoded from its stored JSON.
    pub fn from_json(json: &str) -> Result<TargetResult, serde_json::Error> {
        serde_json::from_str(json)
    }
}

/// Whether `v` nests arrays and objects more than `max` deep (a scalar is 0 deep). Looks no
/// deeper than `max + 1`, so the recursion is bounded whatever `v` holds.
fn nests_deeper(v: &serde_json::Value, max: usize) -> bool {
    let deeper = |x: &serde_json::Value| nests_deeper(x, max.saturating_sub(1));
    match v {
        // An empty array or object is one level deep too.
        serde_json::Value::Array(a) => max == 0 || a.iter().any(deeper),
        serde_json::Value::Object(o) => max == 0 || o.values().any(deeper),
        _ => false,
    }
}

/// A failure with an agent-facing hint. `Display` is `msg`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, thiserror::Error)]
#[error("{msg}")]
pub struct TargetError {
    /// The HTTP status the same failure would get; for metrics only, never stored.
    pub status: u16,
    /// What went wrong, stored as the target's error.
    pub msg: String,
    /// What the agent can do about it, stored as the target's hint.
    pub hint: String,
}

/// Why a fetch did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum FetchError {
    /// The target was only busy: try it again later.
    #[error("{0}")]
    RetryLater(String),
    /// A failure with an agent-facing hint.
    #[error("{0}")]
    Target(TargetError),
    /// Any other failure: stored with its text and no hint.
    #[error("{0}")]
    Other(String),
}

/// Who submitted a job. Kept in memory only, never persisted; `key_sha256` is never logged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Caller {
    /// The caller's name: caps and idempotency are per name.
    pub name: String,
    /// The caller's workspace.
    pub workspace: String,
    /// The SHA-256 of the caller's key.
    pub key_sha256: String,
}

macro_rules! str_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $s:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The lowercase name, as stored and serialized.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $s,)+
                }
            }

            /// The variant named `s` (its `as_str()` form), if any.
            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $($s => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

str_enum! {
    /// The class of a caller, stored with its jobs.
    CallerClass {
        /// A caller of the fleet.
        Fleet => "fleet",
        /// A restricted caller.
        Restricted => "restricted",
    }
}

str_enum! {
    /// Where a job is in its life. Done, partial, failed and cancelled are terminal: final.
    JobStatus {
        /// Stored, not yet reached by a worker.
        Queued => "queued",
        /// A worker has started its first target.
        Running => "running",
        /// Every target is done.
        Done => "done",
        /// Some targets are done and some failed.
        Partial => "partial",
        /// Every target failed, or the job was interrupted or closed.
        Failed => "failed",
        /// Cancelled by `cancel`.
        Cancelled => "cancelled",
    }
}

impl JobStatus {
    /// Whether the status is final: done, partial, failed or cancelled.
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobStatus::Queued | JobStatus::Running)
    }

    /// Whether the job is live: queued or running.
    pub fn is_live(self) -> bool {
        !self.is_terminal()
    }
}

str_enum! {
    /// Where one target is.
    TargetState {
        /// Not started, or waiting to be retried.
        Pending => "pending",
        /// Being fetched.
        Running => "running",
        /// Fetched; its result is stored.
        Done => "done",
        /// Failed; its error (and hint) are stored.
        Failed => "failed",
    }
}

impl TargetState {
    /// Whether the target's outcome is stored: done or failed.
    pub fn is_finished(self) -> bool {
        matches!(self, TargetState::Done | TargetState::Failed)
    }
}

str_enum! {
    /// What happened to a job, as reported to [`Hooks::job`](crate::Hooks::job).
    JobOutcome {
        /// A new job was stored.
        Created => "created",
        /// A submit returned an existing job (idempotency).
        Reused => "reused",
        /// Every target is done.
        Done => "done",
        /// Some targets done, some failed.
        Partial => "partial",
        /// Every target failed, or the job was interrupted or closed.
        Failed => "failed",
        /// The job was cancelled.
        Cancelled => "cancelled",
    }
}

/// A job as a caller sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// 32 lowercase hex characters.
    pub id: String,
    /// The submitting caller's name.
    pub caller: String,
    /// Where the job is.
    pub status: JobStatus,
    /// Why a job failed as a whole (`interrupted`, `runner closed`), else empty.
    pub error: String,
    /// How many targets the job has.
    pub targets_total: usize,
    /// How many targets are done or failed.
    pub targets_done: usize,
    /// When the job was submitted, unix seconds.
    pub created_at: i64,
}

/// One target of a job as a caller sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetStatus {
    /// Its position in the job, from 0.
    pub idx: usize,
    /// What it fetches.
    pub url: String,
    /// Where it is.
    pub status: TargetState,
    /// Its result, when done (and decodable).
    pub result: Option<TargetResult>,
    /// Its error, when failed; or a note that the stored result could not be decoded.
    pub error: String,
    /// What an agent can do about the error.
    pub hint: String,
}

/// A job and its targets, in idx order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// The job.
    pub job: Job,
    /// Its targets in idx order.
    pub targets: Vec<TargetStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_serialize_as_an_empty_object() {
        assert_eq!(serde_json::to_string(&Options::default()).unwrap(), "{}");
        // to_json's shortcut for them writes exactly what the serializer does, and reads back.
        assert_eq!(Options::default().to_json(), "{}");
        assert_eq!(Options::from_json("{}").unwrap(), Options::default());
        assert_eq!(
            serde_json::from_str::<Options>("{}").unwrap(),
            Options::default()
        );
    }

    #[test]
    fn options_keep_field_order_and_omit_empty_values() {
        let o = Options {
            mode: "text".into(),
            grep: "rust".into(),
            context: Some(false),
            recover: true,
            ..Options::default()
        };
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"mode":"text","grep":"rust","context":false,"recover":true}"#
        );
        let all = Options {
            mode: "m".into(),
            question: "q".into(),
            pages: "p".into(),
            grep: "g".into(),
            jq: "j".into(),
            context: Some(true),
            recover: true,
        };
        let s = serde_json::to_string(&all).unwrap();
        assert_eq!(
            s,
            r#"{"mode":"m","question":"q","pages":"p","grep":"g","jq":"j","context":true,"recover":true}"#
        );
        assert_eq!(serde_json::from_str::<Options>(&s).unwrap(), all);
    }

    /// `to_json` and `from_json` (what the stores hold in the options column) write and read
    /// set options, not only the default ones they shortcut.
    #[test]
    fn set_options_round_trip_through_to_json_and_from_json() {
        let o = Options {
            mode: "text".into(),
            context: Some(false),
            ..Options::default()
        };
        let json = o.to_json();
        assert_eq!(json, r#"{"mode":"text","context":false}"#);
        assert_eq!(Options::from_json(&json).unwrap(), o);
    }

    #[test]
    fn target_serializes_url_then_options() {
        let t = Target {
            url: "https://example.com/a".into(),
            options: Options::default(),
        };
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"url":"https://example.com/a","options":{}}"#
        );
        let back: Target = serde_json::from_str(r#"{"url":"u"}"#).unwrap();
        assert_eq!(back.options, Options::default());
    }

    #[test]
    fn target_result_omits_empty_meta() {
        let mut r = TargetResult {
            content: "hi".into(),
            meta: serde_json::Map::new(),
        };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"content":"hi"}"#);
        r.meta.insert("status".into(), 200.into());
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"content":"hi","meta":{"status":200}}"#);
        assert_eq!(serde_json::from_str::<TargetResult>(&s).unwrap(), r);
    }

    /// `{"x": [[…null…]]}` with `arrays` arrays.
    fn nested(arrays: usize) -> TargetResult {
        let mut v = serde_json::Value::Null;
        for _ in 0..arrays {
            v = serde_json::Value::Array(vec![v]);
        }
        let mut meta = serde_json::Map::new();
        meta.insert("x".into(), v);
        TargetResult {
            content: "c".into(),
            meta,
        }
    }

    /// A view of one done target whose result is `r`, through JSON and back.
    fn view_round_trip(r: &TargetResult) -> serde_json::Result<JobView> {
        let view = JobView {
            job: Job {
                id: "a".into(),
                caller: "c".into(),
                status: JobStatus::Done,
                error: String::new(),
                targets_total: 1,
                targets_done: 1,
                created_at: 0,
            },
            targets: vec![TargetStatus {
                idx: 0,
                url: "u".into(),
                status: TargetState::Done,
                result: Some(r.clone()),
                error: String::new(),
                hint: String::new(),
            }],
        };
        serde_json::from_str(&serde_json::to_string(&view)?)
    }

    #[test]
    fn meta_as_deep_as_can_be_read_back_is_stored_and_deeper_is_refused() {
        let ok = nested(MAX_META_DEPTH);
        let json = ok.to_json().unwrap();
        assert_eq!(TargetResult::from_json(&json).unwrap(), ok);
        let view = view_round_trip(&ok).unwrap();
        assert_eq!(view.targets[0].result.as_ref(), Some(&ok));
        // One level more could be stored but not read back inside a view (`rota status`):
        // refused, naming the field.
        let deep = nested(MAX_META_DEPTH + 1);
        assert!(view_round_trip(&deep).is_err());
        let e = deep.to_json().unwrap_err().to_string();
        assert!(
            e.contains("meta field \"x\" nests deeper than 122 levels"),
            "{e}"
        );
        // Objects count as arrays do; a far deeper value is refused all the same.
        let mut obj = serde_json::Value::Null;
        for _ in 0..1_000 {
            let mut m = serde_json::Map::new();
            m.insert("k".into(), obj);
            obj = serde_json::Value::Object(m);
        }
        let mut meta = serde_json::Map::new();
        meta.insert("o".into(), obj);
        let r = TargetResult {
            content: String::new(),
            meta,
        };
        assert!(r.to_json().is_err());
    }

    /// Objects in meta nest as deep as arrays may: exactly `MAX_META_DEPTH` levels are stored
    /// and read back, one more is refused.
    #[test]
    fn meta_objects_as_deep_as_can_be_read_back_are_stored_and_deeper_are_refused() {
        let nested_objects = |levels: usize| {
            let mut v = serde_json::Value::Null;
            for _ in 0..levels {
                let mut m = serde_json::Map::new();
                m.insert("k".into(), v);
                v = serde_json::Value::Object(m);
            }
            let mut meta = serde_json::Map::new();
            meta.insert("o".into(), v);
            TargetResult {
                content: "c".into(),
                meta,
            }
        };
        let ok = nested_objects(MAX_META_DEPTH);
        assert_eq!(TargetResult::from_json(&ok.to_json().unwrap()).unwrap(), ok);
        assert!(nested_objects(MAX_META_DEPTH + 1).to_json().is_err());
    }

    /// Only done and failed targets count as finished (`targets_done`, SPEC §6).
    #[test]
    fn only_done_and_failed_targets_are_finished() {
        assert!(!TargetState::Pending.is_finished());
        assert!(!TargetState::Running.is_finished());
        assert!(TargetState::Done.is_finished());
        assert!(TargetState::Failed.is_finished());
    }

    #[test]
    fn floats_in_meta_round_trip_exactly() {
        for f in [
            1.947700395895162e-169,
            -1.490143767845386e129,
            6.162599865641032e196,
            0.1,
        ] {
            let mut meta = serde_json::Map::new();
            meta.insert("f".into(), serde_json::json!(f));
            let r = TargetResult {
                content: String::new(),
                meta,
            };
            let back = TargetResult::from_json(&r.to_json().unwrap()).unwrap();
            assert_eq!(back.meta["f"].as_f64(), Some(f));
        }
    }

    #[test]
    fn enums_serialize_as_their_lowercase_names() {
        for s in JobStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(JobStatus::parse(s.as_str()), Some(*s));
        }
        for s in TargetState::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in JobOutcome::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(serde_json::to_value(CallerClass::Fleet).unwrap(), "fleet");
        assert_eq!(CallerClass::Restricted.as_str(), "restricted");
        assert_eq!(JobStatus::parse("Done"), None);
        assert!(JobStatus::Cancelled.is_terminal() && JobStatus::Running.is_live());
    }

    #[test]
    fn target_error_displays_its_msg() {
        let e = TargetError {
            status: 404,
            msg: "HTTP 404".into(),
            hint: "check".into(),
        };
        assert_eq!(e.to_string(), "HTTP 404");
        assert_eq!(FetchError::Target(e).to_string(), "HTTP 404");
        assert_eq!(FetchError::Other("boom".into()).to_string(), "boom");
    }
}
