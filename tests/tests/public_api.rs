//! SPEC §2's public API, as code outside the project uses it: the derives it lists for each
//! type, and the traits the runner's handle must have. A missing derive fails to compile.

use std::fmt::Debug;

use rota::{
    Caller, CallerClass, FetchError, Job, JobOutcome, JobStatus, JobView, Options, Runner,
    StoreError, SubmitError, Submitted, Target, TargetError, TargetResult, TargetState,
    TargetStatus,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What SPEC §2 says every type it lists derives (Config and the traits excepted).
fn listed<T: Debug + Clone + PartialEq + Serialize + DeserializeOwned>() {}

#[test]
fn every_listed_type_derives_what_the_spec_says() {
    listed::<Options>();
    listed::<Target>();
    listed::<TargetResult>();
    listed::<TargetError>();
    listed::<FetchError>();
    listed::<Caller>();
    listed::<CallerClass>();
    listed::<JobStatus>();
    listed::<TargetState>();
    listed::<Job>();
    listed::<TargetStatus>();
    listed::<JobView>();
    listed::<JobOutcome>();
    listed::<SubmitError>();
    listed::<StoreError>();

    fn default<T: Default>() {}
    default::<Options>();
    default::<Target>();
    default::<TargetResult>();

    fn submitted<T: Debug + Clone + PartialEq>() {}
    submitted::<Submitted>();

    fn handle<T: Clone + Send + Sync + 'static>() {}
    handle::<Runner>();
}
