#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, ASan + UBSan) in build-fuzz/ and runs each one for
# SECONDS (default 60), one after the other, on a copy of its seed corpus fuzz/corpus/<target>/
# (new inputs go to build-fuzz/fuzz-work/, never into the repository). Inputs saved under
# fuzz/regressions/<target>/ are replayed first.
#
#   bash fuzz/run.sh [SECONDS]           all targets
#   bash fuzz/run.sh --build-only        only build them (CI builds while other stages run)
#   FUZZ_TARGETS="filter_fuzzer" bash fuzz/run.sh 30
#   FUZZ_TARGETS=print_fmt_fuzzer bash fuzz/run.sh   (not in the default list: finds libtraceevent bugs)
#   JOBS=2 (build parallelism), BUILD_DIR=build-fuzz
#
# Exits non-zero when any target crashes, leaks, times out (-timeout=10 per input), runs out
# of memory (-rss_limit_mb=2048) or a regression input still fails; prints each reproducer's path
# and how to replay it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_ONLY=""
if [[ ${1:-} == --build-only ]]; then BUILD_ONLY=1; shift; fi
SECONDS_EACH="${1:-60}"
BUILD_DIR="${BUILD_DIR:-build-fuzz}"
JOBS="${JOBS:-2}"
ALL_TARGETS="format_fuzzer filter_fuzzer config_fuzzer ring_cursor_fuzzer sample_decode_fuzzer elf_fuzzer perf_map_fuzzer cfi_fuzzer"
TARGETS="${FUZZ_TARGETS:-$ALL_TARGETS}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz/run.sh: clang++ not found (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi

echo "== fuzz: configure and build $BUILD_DIR (clang++, -fsanitize=fuzzer,address,undefined)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPE_FUZZ=ON -DTPE_SANITIZE=ON -DTPE_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD_DIR" --target tpe_fuzzers -j"$JOBS"
[[ -n $BUILD_ONLY ]] && exit 0

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/fuzz/lsan.supp}"
WORK="$BUILD_DIR/fuzz-work"
failed=()
summary=()

for t in $TARGETS; do
  bin="$BUILD_DIR/fuzz/$t"
  dir="$WORK/$t"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  seeds="fuzz/corpus/$t"
  [[ $t == print_fmt_fuzzer ]] && seeds=fuzz/corpus/format_fuzzer
  cp "$seeds"/* "$dir/corpus/"
  dict=()
  if [[ -f fuzz/$t.dict ]]; then dict=(-dict="fuzz/$t.dict"); fi
  [[ $t == print_fmt_fuzzer ]] && dict=(-dict=fuzz/format_fuzzer.dict)
  # cfi_fuzzer: whole malloc stacks, so that lsan.supp's libdw entry matches by function name
  # (the fast unwinder stops inside libelf, which has no frame pointers).
  asan="$ASAN_OPTIONS"
  [[ $t == cfi_fuzzer ]] && asan="$ASAN_OPTIONS:fast_unwind_on_malloc=0"

  # Replay saved findings strictly (TPE_FUZZ_STRICT=1: no known-bug tolerance in the targets).
  if compgen -G "fuzz/regressions/$t/*" >/dev/null; then
    echo "== fuzz: $t: replaying fuzz/regressions/$t/"
    for f in fuzz/regressions/"$t"/*; do
      [[ $f == *.txt || $f == *.md ]] && continue
      if ! ASAN_OPTIONS="$asan" TPE_FUZZ_STRICT=1 "$bin" "$f" >"$dir/regression.log" 2>&1; then
        echo "fuzz: $t: regression input still fails: $f"
        grep -E "ERROR|check failed|threw|runtime error|SUMMARY" "$dir/regression.log" | head -5 || true
        echo "   replay: TPE_FUZZ_STRICT=1 $bin $f"
        failed+=("$t (regression $f)")
      fi
    done
  fi

  echo "== fuzz: $t for ${SECONDS_EACH}s"
  set +e
  ASAN_OPTIONS="$asan" "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" "${dict[@]}" "$dir/corpus" >"$dir/fuzz.log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$dir/fuzz.log" | awk '{print $2}' | tail -1)
  last=$(grep -E '^#[0-9]+' "$dir/fuzz.log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' || true)
  summary+=("$(printf '%-22s rc=%-3s execs=%-10s %s' "$t" "$rc" "${execs:-?}" "$last")")
  artifacts=$(find "$dir/artifacts" -type f | sort)
  if [[ $rc -ne 0 || -n $artifacts ]]; then
    echo "fuzz: $t FAILED (exit $rc); log: $dir/fuzz.log"
    grep -E "ERROR: |check failed|threw|runtime error|SUMMARY|Test unit written" "$dir/fuzz.log" | head -10 || true
    for a in $artifacts; do echo "   reproducer: $a   (replay: $bin $a)"; done
    failed+=("$t")
  fi
done

echo "== fuzz: summary (${SECONDS_EACH}s each)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings"
