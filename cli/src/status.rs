//! `rota status ID`: a stored job, read straight from the store.
//!
//! It does not start a [`rota::Runner`]: a runner's start recovers the store (it fails every
//! live job), and reading a job must change nothing.

use std::process::ExitCode;

use rota::{BatchStore, JobView, StoreError, TargetRow};

use crate::store_url::StoreUrl;

/// The stored job `id` and its targets in idx order, if the store holds it. Writes nothing.
pub async fn read_view(store: &dyn BatchStore, id: &str) -> Result<Option<JobView>, StoreError> {
    let Some((job, targets)) = store.view(id).await? else {
        return Ok(None);
    };
    Ok(Some(JobView {
        job: job.to_job(),
        targets: targets.iter().map(TargetRow::to_status).collect(),
    }))
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
    let view = read_view(&*opened, id)
        .await
        .map_err(|e| format!("reading job {id} from {store}: {e}"))?
        .ok_or_else(|| {
            format!(
                "no job {id} in {store} (a job is kept for --ttl after its last activity, \
                 and may be evicted past --max-bytes)"
            )
        })?;
    let json =
        serde_json::to_string_pretty(&view).map_err(|e| format!("encoding job {id}: {e}"))?;
    if !say!("{json}") {
        return Err("writing stdout: it is closed".into());
    }
    Ok(ExitCode::SUCCESS)
}
