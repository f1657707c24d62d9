"""Moved to `orchard_cli.families` (the registry is the core's); kept so old imports work."""

from orchard_cli.families import (  # noqa: F401
    FILE_FAMILY,
    FILE_SUFFIXES,
    FOLDER_FAMILY,
    families,
    find_suite,
    folder_family,
    is_file_suite,
    list_suites,
    load_family,
    load_suite,
    open_suite,
    resolve,
)
