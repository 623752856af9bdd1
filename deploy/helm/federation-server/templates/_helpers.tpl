{{- define "federation-server.name" -}}federation-server{{- end -}}

{{- define "federation-server.labels" -}}
app.kubernetes.io/name: federation-server
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: gpu-federation
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "federation-server.selector" -}}
app.kubernetes.io/name: federation-server
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "federation-server.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret and key holding the database URL, after checking exactly one source is given. */}}
{{- define "federation-server.databaseSecret" -}}
{{- $db := .Values.database -}}
{{- $given := 0 -}}
{{- if $db.url }}{{ $given = add1 $given }}{{ end -}}
{{- if $db.existingSecret }}{{ $given = add1 $given }}{{ end -}}
{{- if $db.cloudnativepg.enabled }}{{ $given = add1 $given }}{{ end -}}
{{- if ne $given 1 -}}
{{- fail "database: set exactly one of database.url, database.existingSecret and database.cloudnativepg.enabled" -}}
{{- end -}}
{{- if $db.cloudnativepg.enabled -}}
name: {{ .Release.Name }}-db-app
key: uri
{{- else if $db.existingSecret -}}
name: {{ $db.existingSecret }}
key: {{ $db.secretKey }}
{{- else -}}
name: {{ .Release.Name }}-database
key: url
{{- end -}}
{{- end -}}

{{- define "federation-server.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
