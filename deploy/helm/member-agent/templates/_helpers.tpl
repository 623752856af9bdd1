{{- define "member-agent.labels" -}}
app.kubernetes.io/name: member-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: gpu-federation
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "member-agent.selector" -}}
app.kubernetes.io/name: member-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
