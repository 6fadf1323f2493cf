{{/* Names and labels of the agentbox-agent chart (Helm 3 conventions). */}}

{{- define "agentbox-agent.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agentbox-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: immutable on a Deployment, so no version in them. */}}
{{- define "agentbox-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agentbox-agent.labels" -}}
helm.sh/chart: {{ include "agentbox-agent.chart" . }}
{{ include "agentbox-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "agentbox-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agentbox-agent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the hub URL and join token: an existing one or ours. */}}
{{- define "agentbox-agent.hubSecretName" -}}
{{- default (printf "%s-hub" (include "agentbox-agent.fullname" .)) .Values.hub.existingSecret -}}
{{- end -}}

{{- define "agentbox-agent.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The cluster id, checked here so every template fails with the same message. */}}
{{- define "agentbox-agent.clusterId" -}}
{{- $id := required "agent.clusterId is required: this cluster's id, a DNS label of at most 24 characters (--set agent.clusterId=eu-1)" .Values.agent.clusterId -}}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?$" $id) -}}
{{- fail (printf "agent.clusterId %q is not a DNS label of at most 24 characters (a-z, 0-9, '-')" $id) -}}
{{- end -}}
{{- $id -}}
{{- end -}}
