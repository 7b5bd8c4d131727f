# --help documents every command and every option with its default.
. "$(dirname "$0")/lib.sh"

expect_exit 0 "$REFIT" --help
expect_grep "  run " "$TMP/out"
expect_grep "  plan " "$TMP/out"
for cmd in run plan; do
  expect_exit 0 "$REFIT" $cmd --help
  options=$(grep -c '^  --' "$TMP/out")
  defaults=$(tr '\n' ' ' <"$TMP/out" | grep -o '(default:' | wc -l)
  [ "$options" -gt 5 ] || fail "refit $cmd --help lists only $options options"
  [ "$options" -eq "$defaults" ] || fail "refit $cmd --help: $options options but $defaults defaults"
done
expect_exit 0 "$REFIT" run --help
expect_grep "transports in this build (--transport): mpi" "$TMP/out"
expect_grep "(default: 256MiB, unit: bytes)" "$TMP/out"
expect_exit 0 "$REFIT" --version
expect_grep "refit 0.1.0 (git " "$TMP/out"
expect_error 2 "refit: error: unknown command 'fly'; see refit --help" "$REFIT" fly
finish
