"""The chaos suite: real workers on real git remotes under kills, partitions, clock skew
and hostile input, judged afterwards by a history checker (checker.py).

See README.md in this folder for what runs where and how to run the full size.
"""
