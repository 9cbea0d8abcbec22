"""pytest setup. dtorch is imported as installed in the running environment:
the project's .venv (tools/setup.sh puts a .pth file there pointing at this
checkout's python/ directory) or a `pip install .` of the package."""
