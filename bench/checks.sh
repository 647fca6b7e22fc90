# shellcheck shell=sh
# Sourced by bench/bench.sh and bench/profile.sh: a curl configuration
# that sends a run of checks (curl -K FILE, one after another or with
# --parallel), each printing its status on a line of its own.

# curl_checks N URL KEY ROUTE SUBJECT MAX_TIME: prints the configuration of
# N checks, POST URL with the API key KEY and the body {"route":ROUTE,
# "subject":...}, each with MAX_TIME seconds at most.  SUBJECT is a printf
# format given the check's number (1 to N): "m%d" makes a new subject for
# every check, a plain text the same one.
curl_checks() {
    awk -v n="$1" -v url="$2" -v key="$3" -v route="$4" -v subject="$5" \
        -v max="$6" 'BEGIN {
        for (i = 1; i <= n; i++) {
            if (i > 1) print "next"
            printf "url = \"%s\"\n", url
            printf "header = \"X-API-Key: %s\"\n", key
            print "header = \"Content-Type: application/json\""
            printf "data-raw = \"{\\\"route\\\":\\\"%s\\\",\\\"subject\\\":\\\"%s\\\"}\"\n",
                route, sprintf(subject, i)
            print "output = \"/dev/null\""
            print "write-out = \"%{http_code}\\n\""
            printf "max-time = %s\n", max
        }
    }'
}
