{{/* Names and labels of the agentbox-hub chart (Helm 3 conventions). */}}

{{- define "agentbox-hub.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agentbox-hub.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agentbox-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agentbox-hub.labels" -}}
helm.sh/chart: {{ include "agentbox-hub.chart" . }}
{{ include "agentbox-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "agentbox-hub.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "agentbox-hub.secretName" -}}
{{- default (printf "%s-secret" (include "agentbox-hub.fullname" .)) .Values.hub.secret.existingSecret -}}
{{- end -}}

{{- define "agentbox-hub.databaseSecretName" -}}
{{- default (printf "%s-database" (include "agentbox-hub.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{- define "agentbox-hub.postgresqlName" -}}
{{- printf "%s-postgresql" (include "agentbox-hub.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The URL the chart writes into its database Secret. */}}
{{- define "agentbox-hub.databaseUrl" -}}
{{- if .Values.postgresql.enabled -}}
{{- $pw := required "postgresql.password is required with postgresql.enabled" .Values.postgresql.password -}}
{{- printf "postgres://%s:%s@%s:5432/%s?sslmode=disable" .Values.postgresql.user (urlquery $pw) (include "agentbox-hub.postgresqlName" .) .Values.postgresql.database -}}
{{- else -}}
{{- required "database.url is required (or database.existingSecret, or postgresql.enabled=true for a trial database): postgres://user:password@host:5432/db" .Values.database.url -}}
{{- end -}}
{{- end -}}

{{/* Environment every hub container needs to reach PostgreSQL. */}}
{{- define "agentbox-hub.databaseEnv" -}}
- name: AGENTBOX_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "agentbox-hub.databaseSecretName" . }}
      key: {{ .Values.database.urlKey }}
{{- end -}}
