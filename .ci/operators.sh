#!/usr/bin/env bash
# operators.sh checks the operators' bundle of the module prometheus/ with
# Prometheus's own promtool (built by .ci/promtool.sh unless PROMTOOL gives
# it): the rules' syntax (check rules), their unit tests (test rules, each
# alert firing and not firing), and, in the tests module, that the rules,
# their test series and the dashboard match what the library really
# exports after real acquisitions on a real etcd (tests/operators_test.go),
# and that every dashboard query parses (TestOperatorsDashboardQueries).
#
# Usage: bash .ci/operators.sh   (a minute once promtool is cached; see
# .ci/promtool.sh for its first build)
set -euo pipefail
cd "$(dirname "$0")/.."
PROMTOOL=${PROMTOOL:-$(bash .ci/promtool.sh)}
export PROMTOOL
echo "promtool: $PROMTOOL"
"$PROMTOOL" check rules prometheus/rules.yml
"$PROMTOOL" test rules prometheus/rules_test.yml
go test -count=1 -run 'TestOperators|TestMetricsSeriesFromStart' ./tests/
