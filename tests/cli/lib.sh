# Helpers for the CLI tests: run refit the way a user does and compare exit codes and output
# exactly. Sourced by every tests/cli/*.sh; $REFIT points at the binary (set by CTest).
set -u
: "${REFIT:?REFIT must point at the refit binary}"
: "${REFIT_SOURCE_DIR:?}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

# need_h5py: sets PY to Debian's python3 and exits 77 (skipped) where it cannot import h5py,
# which the scripts that craft HDF5 files need.
need_h5py() {
  PY=/usr/bin/python3
  "$PY" -c 'import h5py' 2>/dev/null && return 0
  echo "SKIP: h5py is not importable by $PY"
  exit 77
}

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_exit CODE CMD...: runs CMD, keeps stdout/stderr in $TMP/out and $TMP/err.
expect_exit() {
  local want=$1
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "'$*' exited $got, expected $want; stderr: $(head -c 600 "$TMP/err")"
  fi
}

# expect_error CODE "exact stderr line" CMD...: the command fails with exactly one line.
expect_error() {
  local want=$1 line=$2
  shift 2
  expect_exit "$want" "$@"
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ "$lines" -ne 1 ] || [ "$(cat "$TMP/err")" != "$line" ]; then
    fail "'$*' stderr was:
$(cat "$TMP/err")
expected exactly:
$line"
  fi
}

# expect_grep PATTERN FILE: FILE has a line matching the fixed string PATTERN.
expect_grep() {
  grep -qF -- "$1" "$2" || fail "'$2' lacks '$1'; it holds: $(head -c 800 "$2")"
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "all checks passed"
  exit 0
}

# mpirun with the options every test needs (oversubscribed, as root in CI).
MPIRUN=("${MPIEXEC:-mpirun}" --oversubscribe)

# expect_rows N: the last command printed N result rows, each with #wrong 0 and checksums ok
# (or "-" where that verification did not run), and the footer "# PASS".
expect_rows() {
  local want=$1 rows
  rows=$(grep -v '^#' "$TMP/out" | grep -c .)
  [ "$rows" -eq "$want" ] || fail "expected $want result rows, got $rows: $(cat "$TMP/out")"
  grep -v '^#' "$TMP/out" | awk -v f="$TMP/badrows" '
    NF != 16 || ($14 != "0" && $14 != "-") || ($15 != "ok" && $15 != "-") { print > f }'
  [ -s "$TMP/badrows" ] && fail "rows failed verification: $(cat "$TMP/badrows")"
  rm -f "$TMP/badrows"
  [ "$(tail -n 1 "$TMP/out")" = "# PASS" ] || fail "footer is not '# PASS': $(tail -n 1 "$TMP/out")"
}

# expect_error_mpi CODE "exact line" CMD...: like expect_error for jobs under mpirun, whose
# launcher adds its own banner: exactly one line from refit, equal to the given one.
expect_error_mpi() {
  local want=$1 line=$2
  shift 2
  expect_exit "$want" "$@"
  grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' >"$TMP/refit_err"
  if [ "$(wc -l <"$TMP/refit_err")" -ne 1 ] || [ "$(cat "$TMP/refit_err")" != "$line" ]; then
    fail "'$*' printed:
$(cat "$TMP/refit_err")
expected exactly one line:
$line"
  fi
}

# expect_error_ranks CODE "exact line" CMD...: a job under mpirun whose failing ranks each say
# the same thing: their refit lines, repeats removed, are exactly the given one.
expect_error_ranks() {
  local want=$1 line=$2 got
  shift 2
  expect_exit "$want" "$@"
  got=$(grep '^refit' "$TMP/err" | sed 's/^refit\[[^]]*\]/refit/' | sort -u)
  [ "$got" = "$line" ] || fail "'$*' printed:
$got
expected every rank's line to be:
$line"
}

# attr FILE RUN NAME: one attribute of /runs/RUN of a results file, without quotes.
attr() {
  h5dump -a "/runs/$2/$3" "$1" 2>/dev/null | awk '/\(0\):/ { sub(/.*\(0\): /, ""); gsub(/"/, "");
    print; exit }'
}

# expect_same WHAT GOT WANT: GOT equals WANT, else the test fails naming WHAT.
expect_same() {
  [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
}
