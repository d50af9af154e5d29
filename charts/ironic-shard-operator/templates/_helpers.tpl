{{/* Names and labels shared by every template. */}}

{{- define "iso.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "iso.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "iso.selectorLabels" -}}
app.kubernetes.io/name: {{ include "iso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "iso.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "iso.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "iso.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "iso.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "iso.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
What the operator does to the resources of the pools it watches: the same rules whether
granted cluster-wide (ClusterRole) or per watched namespace (Role). Only the verbs the code
uses; see docs/operating.md "Permissions". Not ironiccomputeshards/finalizers: the operator's
owner references set no blockOwnerDeletion (core/podspec.py says why), so clusters enforcing
owner-reference permissions need no such grant.
*/}}
{{- define "iso.workloadRules" -}}
- apiGroups: [ironicshards.io]
  resources: [ironiccomputeshards]
  verbs: [get, list, watch, patch]
- apiGroups: [ironicshards.io]
  resources: [ironiccomputeshards/status]
  verbs: [get, patch, update]
- apiGroups: [ironicshards.io]
  resources: [ironiccomputeshards/scale]
  verbs: [get]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
  {{- with .Values.rbac.secretNames }}
  resourceNames:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* Refuse value combinations a schema cannot express, naming the keys and the fix. */}}
{{- define "iso.checkValues" -}}
{{- if eq (int .Values.metrics.port) (int .Values.health.port) -}}
{{- fail (printf "metrics.port and health.port are both %v: give them different ports" .Values.metrics.port) -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- if has .name (list "WATCH_NAMESPACES" "POD_NAMESPACE" "POD_NAME" "METRICS_PORT" "HEALTH_PORT") -}}
{{- fail (printf "extraEnv: %s is set by the chart itself (see watchNamespaces, metrics.port, health.port); remove it from extraEnv" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
