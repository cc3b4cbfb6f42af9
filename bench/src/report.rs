//! The rows: a table for people, or one JSON object per line.

use serde_json::json;

/// One measured row. `None` fields (and an empty backend) print as `-` in the table and
/// `null` in JSON.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub bench: &'static str,
    pub backend: String,
    pub live_jobs: Option<usize>,
    pub workers: Option<usize>,
    pub targets: Option<u64>,
    pub per_s: Option<f64>,
    pub limit_per_s: Option<f64>,
    pub ratio: Option<f64>,
    pub bytes_per_job: Option<f64>,
}

/// Where rows and notes go.
pub struct Out {
    pub json: bool,
}

fn round(v: Option<f64>, places: i32) -> Option<f64> {
    let k = 10f64.powi(places);
    v.map(|v| (v * k).round() / k)
}

fn cell<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn num(v: Option<f64>, places: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.places$}"))
}

/// A ratio cut (not rounded) to three decimals, so that one just under a goal (0.2996 against
/// 0.3) never prints as if it met it.
fn floor_3(v: f64) -> f64 {
    (v * 1000.0).floor() / 1000.0
}

/// A row as the table prints it, the ratio to three decimals (cut by [`floor_3`]).
fn table_line(r: &Row) -> String {
    format!(
        "{:<8} {:<28} {:>6} {:>7} {:>9} {:>12} {:>12} {:>6} {:>13}",
        r.bench,
        if r.backend.is_empty() {
            "-"
        } else {
            &r.backend
        },
        cell(r.live_jobs),
        cell(r.workers),
        cell(r.targets),
        num(r.per_s, 0),
        num(r.limit_per_s, 0),
        num(r.ratio.map(floor_3), 3),
        num(r.bytes_per_job, 1),
    )
}

impl Out {
    /// The table header (nothing in JSON mode).
    pub fn header(&self) {
        if !self.json {
            println!(
                "{:<8} {:<28} {:>6} {:>7} {:>9} {:>12} {:>12} {:>6} {:>13}",
                "bench",
                "backend",
                "live",
                "workers",
                "targets",
                "per_s",
                "limit_per_s",
                "ratio",
                "bytes_per_job"
            );
        }
    }

    /// One row, printed at once.
    pub fn row(&self, r: &Row) {
        if self.json {
            // Built field by field to keep the documented key order.
            let backend = (!r.backend.is_empty()).then_some(r.backend.as_str());
            let fields = [
                ("bench", json!(r.bench)),
                ("backend", json!(backend)),
                ("live_jobs", json!(r.live_jobs)),
                ("workers", json!(r.workers)),
                ("targets", json!(r.targets)),
                ("per_s", json!(round(r.per_s, 1))),
                ("limit_per_s", json!(round(r.limit_per_s, 1))),
                ("ratio", json!(r.ratio.map(floor_3))),
                ("bytes_per_job", json!(round(r.bytes_per_job, 1))),
            ];
            let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let v = format!("{{{}}}", body.join(","));
            println!("{v}");
        } else {
            println!("{}", table_line(r));
        }
    }

    /// A remark for people: on stdout in the table, on stderr in JSON mode so that stdout stays
    /// one object per line.
    pub fn note(&self, s: &str) {
        if self.json {
            eprintln!("# {s}");
        } else {
            println!("# {s}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_just_under_a_goal_prints_under_it() {
        let r = Row {
            bench: "runner",
            backend: "memory".into(),
            live_jobs: Some(10),
            workers: Some(1),
            targets: Some(320_000),
            per_s: Some(882_243.4),
            limit_per_s: Some(2_966_147.0),
            ratio: Some(882_243.4 / 2_966_147.0),
            bytes_per_job: None,
        };
        let line = table_line(&r);
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "runner", "memory", "10", "1", "320000", "882243", "2966147", "0.297", "-"
            ]
        );
        let just_under = Row {
            ratio: Some(0.29996),
            ..r
        };
        let line = table_line(&just_under);
        assert_eq!(line.split_whitespace().nth(7), Some("0.299"));
    }
}
