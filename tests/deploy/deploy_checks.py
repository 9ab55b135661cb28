"""What the deploy tests share: named checks that report PASS or FAIL and keep going."""

import traceback


class CheckFailed(Exception):
    """A check's finding: its message says what is wrong."""


class CheckRunner:
    """Runs named checks, prints PASS or FAIL for each, and sums them up."""

    def __init__(self):
        self.failures = []

    def check(self, name, fn):
        """Runs `fn`; returns whether it passed. Any exception fails this check only."""
        try:
            fn()
        except CheckFailed as e:
            self.failures.append(name)
            print("FAIL %s\n%s\n" % (name, str(e).rstrip()), flush=True)
            return False
        except Exception:  # a bug here, or a tool that could not run: still one failed check
            self.failures.append(name)
            print("FAIL %s\n%s" % (name, traceback.format_exc()), flush=True)
            return False
        print("PASS %s" % name, flush=True)
        return True

    def summary(self):
        """Prints the outcome; returns the process exit status."""
        if self.failures:
            print("\n%d check(s) failed: %s" % (len(self.failures), "; ".join(self.failures)))
            return 1
        print("\nall checks passed")
        return 0
