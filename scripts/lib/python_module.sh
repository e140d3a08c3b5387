# Sourced by the thin shell CLIs in scripts/: exec_python_module MODULE [ARGS...] runs
# `python -m MODULE ARGS...` with the repo's .venv if there is one (else python3), with the
# repository on PYTHONPATH so the checkout's fairseq_ext is the one imported.
exec_python_module() {
  local repo_root python
  repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  if [[ -x "${repo_root}/.venv/bin/python" ]]; then
    python="${repo_root}/.venv/bin/python"
  else
    python="python3"
  fi
  export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
  exec "${python}" -m "$@"
}
