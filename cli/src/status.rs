//! `rota status ID`: a stored job, read straight from the store.
//!
//! It does not start a [`rota::Runner`]: a runner's start recovers the store (it fails every
//! live job), and reading a job must change nothing.

use std::io::Write;
use std::process::ExitCode;

use rota::{BatchStore, JobRow, JobView, StoreError, TargetRow};

use crate::store_url::StoreUrl;

/// The stored job `id` and its targets in idx order, if the store holds it. Writes nothing.
pub async fn read_view(store: &dyn BatchStore, id: &str) -> Result<Option<JobView>, StoreError> {
    Ok(store
        .view(id)
        .await?
        .map(|(job, targets)| job_view(&job, &targets)))
}

/// A stored job's rows as a [`JobView`].
pub fn job_view(job: &JobRow, targets: &[TargetRow]) -> JobView {
    JobView {
        job: job.to_job(),
        targets: targets.iter().map(TargetRow::to_status).collect(),
    }
}

/// Prints job `id` of `store` as pretty JSON on stdout. An unknown id, or a store file that
/// does not exist (it is not created), is an error.
pub async fn status(store: &StoreUrl, id: &str) -> Result<ExitCode, String> {
    match store {
        StoreUrl::Memory => {
            return Err(format!(
                "no job {id}: the memory store keeps nothing between commands; \
                 use --store sqlite:PATH or redb:PATH to keep jobs"
            ));
        }
        StoreUrl::Sqlite(p) | StoreUrl::Redb(p) if store.is_missing()? => {
            return Err(format!(
                "no store at {}: nothing has run with --store {store} here",
                p.display()
            ));
        }
        _ => {}
    }
    let opened = store.open_for_command()?;
    let reading = |id: &str| {
        let id = id.to_owned();
        move |e: StoreError| format!("reading job {id} from {store}: {e}")
    };
    let mut view = read_view(&*opened, id).await.map_err(reading(id))?;
    // Rota's ids are lowercase; one copied in upper case is the same job (a store used through
    // the library may hold other ids, so the id as given is looked for first).
    let lower = id.to_ascii_lowercase();
    let well_formed = is_job_id(&lower);
    if view.is_none() && well_formed && lower != id {
        view = read_view(&*opened, &lower).await.map_err(reading(&lower))?;
    }
    let Some(view) = view else {
        return Err(if well_formed {
            format!(
                "no job {id} in {store} (a job is kept for --ttl after its last activity, \
                 and may be evicted past --max-bytes)"
            )
        } else {
            format!(
                "no job {id} in {store}: a job id is 32 hexadecimal digits, as `rota run` \
                 printed it"
            )
        });
    };
    // Written as it is encoded: a job of large pages is not held a second time as its text.
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut w, &view).map_err(|e| match e.io_error_kind() {
        Some(_) => format!("writing stdout: {e}"),
        None => format!("encoding job {id}: {e}"),
    })?;
    writeln!(w)
        .and_then(|()| w.flush())
        .map_err(|e| format!("writing stdout: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// Whether `id` has the form of the ids rota makes: 32 lowercase hexadecimal digits.
fn is_job_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
