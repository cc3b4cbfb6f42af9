#!/usr/bin/env bash
# The fuzz smoke run that CI does: builds the fuzz targets and runs each one for FUZZ_SECONDS
# seconds (default 30), starting from its committed corpus in fuzz/corpus/<target>/.
#
# Toolchain: `cargo +nightly fuzz` when a nightly toolchain is installed, else the default
# (stable) toolchain with RUSTC_BOOTSTRAP=1. Installs cargo-fuzz (`cargo install cargo-fuzz
# --locked`) when it is missing. When no toolchain can do it, prints
# "fuzz smoke: SKIPPED (<reason>)" and exits 0.
#
# Exits non-zero when a target does not build or finds a crash; the crashing input is left in
# fuzz/artifacts/<target>/ (reproduce: `cargo +nightly fuzz run -s none <target> <file>`).
#
# The targets are safe Rust over safe Rust or uninstrumented C (SQLite), so they are built
# without a sanitizer (`-s none`): ten times the executions of AddressSanitizer in the same time.
set -uo pipefail

cd "$(dirname "$0")" || exit 1
secs="${FUZZ_SECONDS:-30}"
targets=(machine stores decode)

skip() {
    echo "fuzz smoke: SKIPPED ($1)"
    exit 0
}

# libFuzzer flags per target.
flags() {
    case "$1" in
        decode) echo "-max_len=262144" ;; # the seed store files are up to 136 KiB
        stores) echo "-max_len=4096 -len_control=0" ;; # long op sequences from the start
        *) echo "-max_len=4096" ;;
    esac
}

if ! cargo fuzz --help >/dev/null 2>&1; then
    echo "fuzz smoke: cargo-fuzz is missing; installing it"
    cargo install cargo-fuzz --locked || skip "cargo-fuzz is missing and could not be installed"
fi

if cargo +nightly --version >/dev/null 2>&1; then
    fuzz=(cargo +nightly fuzz)
    how="nightly"
elif RUSTC_BOOTSTRAP=1 rustc -Z unstable-options --version >/dev/null 2>&1; then
    # A failed stable probe may have been cached by cargo.
    rm -f target/.rustc_info.json
    fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
    how="stable with RUSTC_BOOTSTRAP=1"
else
    skip "neither a nightly toolchain nor RUSTC_BOOTSTRAP=1 on stable works"
fi

echo "fuzz smoke: building ${targets[*]} ($how)"
if ! "${fuzz[@]}" build -s none; then
    echo "fuzz smoke: FAILED (the fuzz targets do not build)"
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
    echo "fuzz smoke: $t for ${secs}s"
    mkdir -p "$work/$t"
    # New inputs go to the scratch corpus (first dir); the committed one is only read.
    # shellcheck disable=SC2046 # flags() is a list of words
    if "${fuzz[@]}" run -s none "$t" "$work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=60 -print_final_stats=1 \
        $(flags "$t") 2>"$work/$t.log"; then
        grep -a -E "^Done [0-9]+ runs" "$work/$t.log" | sed "s/^/fuzz smoke: $t: /"
    else
        tail -n 60 "$work/$t.log"
        echo "fuzz smoke: $t FOUND A CRASH (input in fuzz/artifacts/$t/)"
        failed+=("$t")
    fi
done

if ((${#failed[@]})); then
    echo "fuzz smoke: FAILED (${failed[*]})"
    exit 1
fi
echo "fuzz smoke: passed (${targets[*]}, ${secs}s each)"
