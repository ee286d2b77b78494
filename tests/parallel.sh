# Sourced by the test scripts that run their parts side by side.
#
# in_parallel MAX DIR COUNT FUNC: runs "FUNC I" for I = 0 .. COUNT-1, at most
# MAX at a time, each with its output (stdout and stderr) in the file DIR/I;
# returns when every run has ended. The caller prints the files in order,
# and its EXIT trap stops the runs under way (kill $(jobs -p)).
in_parallel() {
    local max=$1 dir=$2 count=$3 func=$4 i running=0
    for ((i = 0; i < count; i++)); do
        if ((running >= max)); then
            wait -n || true
            running=$((running - 1))
        fi
        "$func" "$i" >"$dir/$i" 2>&1 &
        running=$((running + 1))
    done
    wait || true
}
