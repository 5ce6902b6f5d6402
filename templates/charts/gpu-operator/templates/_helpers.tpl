{{- define "gpu-operator.daemonset" -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    app: {{ .name }}
    app.kubernetes.io/part-of: gpu-operator
    app.kubernetes.io/managed-by: {{ .root.Release.Service }}
spec:
  selector:
    matchLabels:
      app: {{ .name }}
  template:
    metadata:
      labels:
        app: {{ .name }}
        app.kubernetes.io/part-of: gpu-operator
    spec:
      nodeSelector:
        nvidia.com/gpu.present: "true"
        {{- with .nodeSelector }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      tolerations:
        {{- toYaml .root.Values.daemonsets.tolerations | nindent 8 }}
      containers:
        - name: {{ .name }}
          image: {{ .image }}
{{- end -}}
