#!/bin/sh
#  man.sh PROGRAM NAME VERSION SUMMARY OUT: writes OUT, the man page of NAME, from
#  PROGRAM --help (so the page and the program never disagree): the help
#  text kept as it is laid out, with roff's escapes, and what the help
#  does not say (files, environment, see also).
set -eu
program=$1 name=$2 version=$3 summary=$4 out=$5
upper=$(echo "$name" | tr '[:lower:]' '[:upper:]')
help=$("$program" --help 2>&1 || true)
[ -n "$help" ] || { echo "man.sh: $program --help printed nothing" >&2; exit 1; }
{
    echo ".TH $upper 1 \"\" \"zactor $version\" \"zactor\""
    echo ".SH NAME"
    echo "$name \\- $summary"
    echo ".SH DESCRIPTION"
    echo ".nf"
    #  A backslash is \e, a minus \- (so options paste as typed); a line that
    #  starts with . or ' would be a request.
    printf '%s\n' "$help" | sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\([.']\)/\\\\\&\1/"
    echo ".fi"
    case $name in
        zactor-run)
            echo ".SH ENVIRONMENT"
            echo ".TP"
            echo ".B TF_CONFIG"
            echo "the cluster and this task, as TensorFlow reads it"
            echo ".SH FILES"
            echo ".TP"
            echo ".I /usr/share/datasets/fashion-mnist"
            echo "the default training and test data (Debian package dataset-fashion-mnist)"
            ;;
    esac
    echo ".SH SEE ALSO"
    for page in zactor-run zactor-top zactor-ckpt; do
        [ "$page" = "$name" ] || echo ".BR $page (1)"
    done
} > "$out"
