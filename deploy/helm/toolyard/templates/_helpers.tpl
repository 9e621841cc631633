{{/* The chart's name. */}}
{{- define "toolyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release-qualified name every object starts with. */}}
{{- define "toolyard.fullname" -}}
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

{{- define "toolyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "toolyard.labels" -}}
helm.sh/chart: {{ include "toolyard.chart" . }}
app.kubernetes.io/name: {{ include "toolyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolyard
{{- end }}

{{- define "toolyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "toolyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "toolyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "toolyard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The checksum of the rendered ConfigMap: a config change rolls the pods. */}}
{{- define "toolyard.configChecksum" -}}
{{- include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end }}

{{/* Environment shared by the gateway and the workers; arg: dict "root" $ "component" NAME. */}}
{{- define "toolyard.commonEnv" -}}
{{- $root := .root -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if $root.Values.nats.urlSecret.name }}
- name: TOOLYARD_NATS
  valueFrom:
    secretKeyRef:
      name: {{ $root.Values.nats.urlSecret.name }}
      key: {{ required "nats.urlSecret.key is required with nats.urlSecret.name" $root.Values.nats.urlSecret.key }}
{{- else }}
- name: TOOLYARD_NATS
  value: {{ required "nats.url is required: the chart needs an external NATS with JetStream (or nats.urlSecret)" $root.Values.nats.url | quote }}
{{- end }}
{{- with $root.Values.nats.credentialsSecret.name }}
- name: TOOLYARD_NATS_CREDS
  value: {{ printf "/var/run/secrets/toolyard/nats-creds/%s" (required "nats.credentialsSecret.key is required with nats.credentialsSecret.name" $root.Values.nats.credentialsSecret.key) | quote }}
{{- end }}
{{- with $root.Values.nats.inboxPrefix }}
- name: TOOLYARD_NATS_INBOX_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- if $root.Values.nats.tlsSecret.name }}
- name: TOOLYARD_NATS_TLS_CA
  value: /var/run/secrets/toolyard/nats-tls/ca.crt
{{- if $root.Values.nats.tlsSecret.clientCertificate }}
- name: TOOLYARD_NATS_TLS_CERT
  value: /var/run/secrets/toolyard/nats-tls/tls.crt
- name: TOOLYARD_NATS_TLS_KEY
  value: /var/run/secrets/toolyard/nats-tls/tls.key
{{- end }}
{{- end }}
{{- with $root.Values.secrets.existingSecret }}
{{- if $root.Values.secrets.stateSecretKey }}
- name: TOOLYARD_STATE_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $root.Values.secrets.stateSecretKey }}
{{- end }}
{{- end }}
{{- with $root.Values.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ printf "toolyard-%s" $.component | quote }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ printf "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),service.namespace=toolyard%s" (ternary (printf ",%s" $root.Values.otel.resourceAttributes) "" (ne $root.Values.otel.resourceAttributes "")) | quote }}
{{- with $root.Values.otel.sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- with $root.Values.otel.samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The NATS credentials and TLS Secrets' mounts (nats.credentialsSecret, nats.tlsSecret), under
a container's volumeMounts; read-only, as the paths toolyard.commonEnv names.
*/}}
{{- define "toolyard.natsVolumeMounts" -}}
{{- if .Values.nats.credentialsSecret.name }}
- name: nats-creds
  mountPath: /var/run/secrets/toolyard/nats-creds
  readOnly: true
{{- end }}
{{- if .Values.nats.tlsSecret.name }}
- name: nats-tls
  mountPath: /var/run/secrets/toolyard/nats-tls
  readOnly: true
{{- end }}
{{- end }}

{{/*
The volumes of toolyard.natsVolumeMounts, under a pod's volumes; only the keys used are
projected, readable by the pod's group (fsGroup), no one else.
*/}}
{{- define "toolyard.natsVolumes" -}}
{{- with .Values.nats.credentialsSecret.name }}
- name: nats-creds
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $.Values.nats.credentialsSecret.key }}
        path: {{ $.Values.nats.credentialsSecret.key }}
{{- end }}
{{- with .Values.nats.tlsSecret.name }}
- name: nats-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
      {{- if $.Values.nats.tlsSecret.clientCertificate }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
{{- end }}
{{- end }}

{{/*
A worker pool's id (its Deployment, labels and config key): its name, then its tenant and
user when it is scoped to them (docs/nats.md "Scoped pools").
*/}}
{{- define "toolyard.workerPool" -}}
{{ .name }}{{ with .tenant }}-{{ . }}{{ end }}{{ with .user }}-{{ . }}{{ end }}{{ with .principal }}-p{{ sha256sum . | trunc 10 }}{{ end }}
{{- end }}

{{- /* The user token a pool's calls carry: its user's, or its principal's token (`p` and the
first 16 bytes of SHA-256 of the principal in hex, docs/nats.md "The caller's principal"). */}}
{{- define "toolyard.workerUserToken" -}}
{{- if .principal }}p{{ sha256sum .principal | trunc 32 }}{{ else }}{{ .user | default "" }}{{ end }}
{{- end }}
