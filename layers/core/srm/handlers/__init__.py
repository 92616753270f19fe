"""Lambda handlers: one module per function; each adapts its event to one call into ``srm`` and maps errors.

``functions/<name>/app.py`` re-exports ``lambda_handler`` so ``template.yaml`` points at the deployment folder
while the code lives here, importable by the local runtime and by tests.
"""
