"""`python -m eagle_probe …` behaves like the `eagle-probe` command."""

import sys

from eagle_probe.cli import EXIT_PIPE, main, quiet_stdout, stdout_gone

if __name__ == "__main__":  # a normal exit: profilers and coverage tools wrap this one
    try:
        code = main(whole_process=True)
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        code = exc.code
    if stdout_gone():  # the reader of stdout left: quietly, as the console script does
        quiet_stdout()
        code = code or EXIT_PIPE
    sys.exit(code)
