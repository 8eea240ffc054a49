"""execsys_facts, controller side: the same facts from hosts that have python3 and no execsys.

Ansible runs this action plugin on the controller for every ``execsys_facts`` task (it is found
beside a playbook in ``action_plugins/``, or through ``ANSIBLE_ACTION_PLUGINS``). It runs the module
as is; where the module answers ``execsys_missing`` (the host has python3 but no execsys), it sends
the controller's own doctor instead, as ``execsys doctor --host`` does over ssh:

1. the host's declaration (``config``), if one is named, is read with ``slurp`` and parsed here;
2. ``execsys.fleet.shipped_programs`` builds the one-line doctor program (the modules travel in
   memory, nothing is written on the host) and the artifact digest program;
3. the module runs them with the host's python3 and returns what they printed;
4. ``execsys.fleet.shipped_host_facts`` folds that into ``ansible_facts.execsys`` with execsys's own
   verdict and line. ``identity`` is null there (nothing pinned on that host) and ``note`` says why.

The controller needs execsys importable by Ansible's Python (``pip install execsys`` beside
ansible-core); without it, the module's own "not installed" failure stands.
"""

from __future__ import annotations

import base64
import importlib.util

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True  # read-only: the doctor changes nothing

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        answer = self._execute_module(module_name="execsys_facts", module_args=args, task_vars=task_vars)
        if not answer.get("execsys_missing"):
            return {**result, **answer}
        if importlib.util.find_spec("execsys") is None:
            answer["msg"] += " (execsys is not importable on the controller either, so it cannot be sent)"
            return {**result, **answer}
        from execsys.errors import ExecsysError
        from execsys.fleet import shipped_host_facts, shipped_programs

        config = args.get("config") or None
        text = None
        if config:
            read = self._execute_module(module_name="ansible.builtin.slurp", module_args={"src": config},
                                        task_vars=task_vars)
            if read.get("failed"):
                return {**result, "failed": True, "changed": False,
                        "msg": f"execsys_facts: cannot read the declaration {config}: {read.get('msg')}"}
            text = base64.b64decode(read["content"]).decode("utf-8", "replace")
        try:
            programs = shipped_programs(text, config, timeout=float(args.get("timeout") or 120))
        except ExecsysError as exc:
            return {**result, "failed": True, "changed": False, "msg": f"execsys_facts: {exc}"}
        shipped = self._execute_module(
            module_name="execsys_facts", task_vars=task_vars,
            module_args={**args, "_execsys_programs": {"doctor": programs.doctor, "digest": programs.digest}})
        if shipped.get("failed") or not isinstance(shipped.get("execsys_shipped"), dict):
            return {**result, **shipped, "changed": False}
        facts = shipped_host_facts(shipped["execsys_shipped"], programs)
        return {**result, "changed": False, "ansible_facts": {"execsys": facts}, "msg": facts["doctor"]["line"]}
