"""The first lines of the READMEs that report commands write into a folder they regenerate in place: the report
writes its title, and the command refuses a folder whose README.md starts otherwise (someone else's, which the
report would overwrite; :func:`simulator.util.paths.check_report_dir`)."""

VALIDATION_TITLE = "# Validation against real engines"  # simulate validate
FIDELITY_TITLE = "# Cost-model fidelity"  # simulate fidelity
PROFILE_FIDELITY_TITLE = "# Cost models against measured kernels"  # simulate fidelity --profile
