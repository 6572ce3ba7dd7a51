{{/*
Helpers for the Phalanx chart. The chart renders under `helm lint --strict` (missing keys are
errors), so every value read here exists in values.yaml.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "phalanx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The resource name prefix: fullnameOverride, else <release>-<name> (just <release> if it contains the name). */}}
{{- define "phalanx.fullname" -}}
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

{{/* The name of one component's objects: (dict "ctx" $ "component" "queue") -> <fullname>-queue. */}}
{{- define "phalanx.componentName" -}}
{{- printf "%s-%s" (include "phalanx.fullname" .ctx) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "phalanx.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "phalanx.labels" -}}
helm.sh/chart: {{ include "phalanx.chart" . }}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: phalanx
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "queue"). */}}
{{- define "phalanx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects: (dict "ctx" $ "component" "queue"). */}}
{{- define "phalanx.componentLabels" -}}
{{ include "phalanx.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The ServiceAccount of a service: (dict "ctx" $ "component" "queue"). */}}
{{- define "phalanx.serviceAccountName" -}}
{{- $svc := index .ctx.Values .component -}}
{{- if .ctx.Values.serviceAccount.create -}}
{{- default (include "phalanx.componentName" .) $svc.serviceAccountName -}}
{{- else -}}
{{- default "default" $svc.serviceAccountName -}}
{{- end -}}
{{- end -}}

{{/* The image of a service: its own block's fields, else the top-level image; tag defaults to appVersion. */}}
{{- define "phalanx.image" -}}
{{- $svc := index .ctx.Values .component -}}
{{- $repo := default .ctx.Values.image.repository $svc.image.repository -}}
{{- $tag := default (default .ctx.Chart.AppVersion .ctx.Values.image.tag) $svc.image.tag -}}
{{- if hasPrefix "sha256:" $tag -}}
{{- printf "%s@%s" $repo $tag -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{- define "phalanx.imagePullPolicy" -}}
{{- $svc := index .ctx.Values .component -}}
{{- default .ctx.Values.image.pullPolicy $svc.image.pullPolicy -}}
{{- end -}}

{{/* host:port of a service inside the cluster: (dict "ctx" $ "component" "queue" "port" 50051). */}}
{{- define "phalanx.serviceAddr" -}}
{{- printf "%s.%s.svc:%d" (include "phalanx.componentName" .) .ctx.Release.Namespace (int .port) -}}
{{- end -}}

{{/* PHALANX_REDIS_URL and PHALANX_REDIS_PREFIX, from the bundled Redis, a Secret or a URL. */}}
{{- define "phalanx.redisEnv" -}}
{{- $r := .Values.redis -}}
- name: PHALANX_REDIS_URL
{{- if $r.existingSecret.name }}
  valueFrom:
    secretKeyRef:
      name: {{ $r.existingSecret.name }}
      key: {{ $r.existingSecret.key }}
{{- else if $r.url }}
  value: {{ $r.url | quote }}
{{- else if $r.enabled }}
  value: {{ printf "redis://%s.%s.svc:%d/%d" (include "phalanx.componentName" (dict "ctx" . "component" "redis")) .Release.Namespace (int $r.port) (int $r.database) | quote }}
{{- else }}
{{- fail "redis: Phalanx needs Redis: set redis.enabled=true for the bundled one, or redis.url / redis.existingSecret.name for an external one" }}
{{- end }}
- name: PHALANX_REDIS_PREFIX
  value: {{ $r.prefix | quote }}
{{- end -}}

{{/* The OpenTelemetry environment of a service: (dict "ctx" $ "component" "queue"). */}}
{{- define "phalanx.otelEnv" -}}
{{- $o := .ctx.Values.otel -}}
- name: OTEL_SERVICE_NAME
  value: {{ printf "phalanx-%s" .component | quote }}
{{- if $o.enabled }}
{{- if not $o.endpoint }}
{{- fail "otel: otel.enabled=true needs otel.endpoint (e.g. http://otel-collector.observability:4317)" }}
{{- end }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $o.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_INSECURE
  value: {{ $o.insecure | toString | quote }}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: K8S_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ printf "service.namespace=phalanx,k8s.namespace.name=%s,k8s.pod.name=$(K8S_POD_NAME),k8s.node.name=$(K8S_NODE_NAME)%s" .ctx.Release.Namespace (ternary (printf ",%s" $o.resourceAttributes) "" (ne $o.resourceAttributes "")) | quote }}
{{- with $o.sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- with $o.samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | toString | quote }}
{{- end }}
{{- else }}
- name: OTEL_SDK_DISABLED
  value: "true"
{{- end }}
{{- end -}}

{{/*
One service's Deployment and Service. Arguments (dict):
  ctx        the root context
  component  queue | scheduler | binder
  port       its gRPC port
  env        extra chart-defined env entries (YAML list text), may be ""
  startupSeconds  how long the startup probe tolerates a service that is not serving yet
  strategy   Recreate | RollingUpdate
  volumes, volumeMounts  extra volumes (YAML list text), may be ""
  podAnnotations  extra chart-defined pod annotations (YAML map text), may be ""
*/}}
{{- define "phalanx.service" -}}
{{- $ctx := .ctx -}}
{{- $svc := index $ctx.Values .component -}}
{{- $sel := dict "ctx" $ctx "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "phalanx.componentName" $sel }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "phalanx.componentLabels" $sel | nindent 4 }}
spec:
  replicas: {{ $svc.replicas }}
  revisionHistoryLimit: 5
  strategy:
    {{- if eq .strategy "Recreate" }}
    type: Recreate
    {{- else }}
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
    {{- end }}
  selector:
    matchLabels:
      {{- include "phalanx.selectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "phalanx.componentLabels" $sel | nindent 8 }}
        {{- with $svc.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if or .podAnnotations $svc.podAnnotations }}
      annotations:
        {{- with .podAnnotations }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with $svc.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "phalanx.serviceAccountName" $sel }}
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ $svc.terminationGracePeriodSeconds }}
      {{- with $svc.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $ctx.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $ctx.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .component }}
          image: {{ include "phalanx.image" $sel | quote }}
          imagePullPolicy: {{ include "phalanx.imagePullPolicy" $sel }}
          command: [{{ printf "phalanx-%s" .component | quote }}]
          env:
            - name: PHALANX_LISTEN
              value: {{ printf "0.0.0.0:%d" (int .port) | quote }}
            - name: PHALANX_CLOCK
              value: real
            - name: PHALANX_BACKEND
              value: kubernetes
            - name: PHALANX_LOG_LEVEL
              value: {{ default $ctx.Values.logLevel $svc.logLevel | quote }}
            - name: PHALANX_SCHEDULER_NAME
              value: {{ $ctx.Values.schedulerName | quote }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- include "phalanx.otelEnv" $sel | nindent 12 }}
            {{- with $svc.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: grpc
              containerPort: {{ .port }}
              protocol: TCP
          startupProbe:
            grpc:
              port: {{ .port }}
              service: liveness
            periodSeconds: 2
            failureThreshold: {{ div .startupSeconds 2 }}
          readinessProbe:
            grpc:
              port: {{ .port }}
              service: readiness
            periodSeconds: 5
            timeoutSeconds: 2
            failureThreshold: 3
          livenessProbe:
            grpc:
              port: {{ .port }}
              service: liveness
            periodSeconds: 10
            timeoutSeconds: 2
            failureThreshold: 3
          {{- with $svc.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- toYaml $ctx.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- with .volumeMounts }}
            {{- . | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            medium: Memory
            sizeLimit: 64Mi
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- with $svc.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $svc.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $svc.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "phalanx.componentName" $sel }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "phalanx.componentLabels" $sel | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "phalanx.selectorLabels" $sel | nindent 4 }}
  ports:
    - name: grpc
      port: {{ .port }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
{{- end -}}
