"""`python -m eagle_probe …` behaves like the `eagle-probe` command."""

from eagle_probe.cli import main

if __name__ == "__main__":  # a normal exit: profilers and coverage tools wrap this one
    raise SystemExit(main(whole_process=True))
