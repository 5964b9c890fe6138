{{- define "levergate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "levergate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "levergate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "levergate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "levergate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "levergate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "levergate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "levergate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* One variable whose value is the Redis URL: plain, or from the named Secret. */}}
{{- define "levergate.redisVar" -}}
- name: {{ .name }}
{{- if .redis.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .redis.existingSecret }}
      key: {{ .redis.secretKey }}
{{- else }}
  value: {{ .redis.url | quote }}
{{- end }}
{{- end -}}
