# One module of rdma-core's test suite, loaded and run as its run_tests.py
# does (the same argument parser, the same `tests` package, unittest), with
# every outcome also written as a JSON line to $PYVERBS_RESULTS as it
# happens: {"test", "outcome": ok|skip|fail|error|xfail|xpass, "reason"}.
# The reason of a failure or error is its exception's last line.
# tests/distro/pyverbs.sh copies this file into the suite's folder.
#
#   softrdma exec -- python3 pyverbs_run.py --dev softrdma0 --gid 0 tests.test_qp
import json
import os
import sys
import traceback
import unittest
from importlib.machinery import SourceFileLoader

from args_parser import parser

out = open(os.environ["PYVERBS_RESULTS"], "a", buffering=1)


def record(test, outcome, reason=""):
    out.write(json.dumps({"test": test.id(), "outcome": outcome, "reason": reason}) + "\n")


def exc_line(err):
    lines = traceback.format_exception_only(err[0], err[1])
    return " ".join(l.strip() for l in lines if l.strip())[-300:]


class Result(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        record(test, "ok")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        record(test, "skip", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        record(test, "fail", exc_line(err))

    def addError(self, test, err):
        super().addError(test, err)
        record(test, "error", exc_line(err))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        record(test, "xfail", exc_line(err))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        record(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            record(subtest, kind, exc_line(err))


module_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__init__.py")
tests = SourceFileLoader("tests", module_path).load_module()
parser.parse_args()
runner = unittest.TextTestRunner(resultclass=Result, verbosity=2)
prog = unittest.main(module=tests, testRunner=runner, exit=False)
# The outcomes are in the JSON lines; the exit status says only whether
# the module ran to its end.
sys.exit(0)
