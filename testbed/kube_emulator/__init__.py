"""A FAKE Kubernetes API server, for tests and the local demo where no real cluster exists.

What it emulates, and what it does not, is listed in README.md. The modules, each with one job
(each imports only modules listed above it: pyproject.toml's layers contract checks it):

- crd_schema.py     CRD structural schemas: pruning, defaulting, validation, CEL rules
- resources.py      ResourceType, the built-in kinds served, the types a CRD adds
- errors.py         ApiError (a failure as a Kubernetes Status) and its constructors
- conditions.py     status conditions read as Kubernetes reads them: pod and node readiness
- paths.py          resource URLs, label and field selectors, simple JSON paths
- builtin_schema.py the real OpenAPI schema of built-in kinds: pruning, merge keys, validation
- patches.py        merge patch, JSON patch, strategic merge patch; server-side apply's checks
- protobuf.py       the protobuf bodies kubectl's `create namespace|secret|configmap` and helm's DELETEs send
- jobs.py           batch/v1 Jobs as the registry admits them: defaults, generated selector, refusals
- workloads.py      apps/v1 Deployments and policy/v1 PodDisruptionBudgets: defaults and refusals
- admission.py      defaults and validation before an object is stored
- tables.py         server-side Table output for `kubectl get`
- discovery.py      /version, /apis, APIResourceLists, /openapi/v2 and /openapi/v3
- authn.py          ServiceAccount tokens (TokenRequest), the check of bearer tokens, the audit of writes
- authz.py          RBAC: each token holder's request authorized as a real server does; the record
- store.py          Store: the objects, the types served, resourceVersions and the watch history
- reads.py          list pages, Tables, Scale views and watches, read from the store
- writes.py         create, PUT/PATCH (status, scale), server-side apply, binding; CRDs served once stored
- deletion.py       Deletion: DELETE, finalizers, grace periods; garbage collection, namespace and CRD cleanup
- pod_gc.py         PodGarbageCollector: the pod GC's force-deletions (out-of-service nodes, deleted nodes)
- disruption.py     DisruptionController: budgets' status; pods/eviction refused (429) as a real server does
- job_controller.py JobController: a Job's pods created, counted, replaced; its end (Complete, Failed)
- pod_logs.py       PodLogs: pods/log as a real server answers it, from what the fake kubelets hand in
- server.py         FakeKubeAPI: requests routed to the modules above; the controllers run on the store
- runner.py         serving it (EmulatorThread) and a kubeconfig for it (kubeconfig_text)
"""
from testbed.kube_emulator.runner import EmulatorThread, kubeconfig_text

__all__ = ['EmulatorThread', 'kubeconfig_text']
