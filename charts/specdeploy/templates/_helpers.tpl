{{/* Chart name, truncated to a DNS label. */}}
{{- define "specdeploy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: the release name, plus the chart name unless already in it. */}}
{{- define "specdeploy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name for cluster-scoped objects: qualified by the release namespace so that two releases
     of the same name in different namespaces do not collide. */}}
{{- define "specdeploy.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "specdeploy.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specdeploy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/). */}}
{{- define "specdeploy.labels" -}}
helm.sh/chart: {{ include "specdeploy.chart" . }}
{{ include "specdeploy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: specdeploy
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "specdeploy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specdeploy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "specdeploy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specdeploy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Image reference: the digest pins it; otherwise the tag, defaulting to appVersion. */}}
{{- define "specdeploy.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The operator's declared permissions (generated from specdeploy.controller.process.permissions). */}}
{{- define "specdeploy.rbacRules" -}}
{{- .Files.Get "files/rbac-rules.yaml" | fromYaml | toJson }}
{{- end }}

{{/* Rules for namespaced resources, plus the Secret rule when opted in. */}}
{{- define "specdeploy.namespacedRules" -}}
{{- $rules := include "specdeploy.rbacRules" . | fromJson }}
{{- $out := list }}
{{- range $rules.namespaced }}
{{- $out = append $out . }}
{{- end }}
{{- if .Values.rbac.secrets.enabled }}
{{- $secret := deepCopy $rules.secrets }}
{{- with .Values.rbac.secrets.resourceNames }}
{{- $_ := set $secret "resourceNames" . }}
{{- end }}
{{- $out = append $out $secret }}
{{- end }}
{{- toYaml $out }}
{{- end }}
